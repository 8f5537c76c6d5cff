"""Models: what prompt hooks reach their models through. The model client (an OpenAI-style
HTTP provider, or a command model run sandboxed), what a run's prompt hooks share (its
placeholders, token budget and per-model concurrency), and the cache of answers worth
reusing. The prompt hook itself, a hook kind, is `run/prompthook.py`.

The names below are loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "modelclient": (
            "ModelFailed",
            "Reply",
            "ask_model",
            "estimate",
            "request_body",
            "shown_url",
        ),
        "promptcache": (
            "CachedAnswer",
            "PromptCache",
            "PromptCacheError",
            "cache_key",
            "entry_document",
            "is_key",
        ),
        "promptrun": ("PromptRun", "artifact_frames", "limiter_for"),
    },
)
