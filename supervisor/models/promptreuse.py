"""Prompt once, keep the script: a prompt hook's `run` and `propose` answers kept in the
prompt cache (`promptcache.py`) and reused without asking the model.

The key is the cache's (`cache_key`): the hook's name, its prompt, the effect in force, the
model's name and id, and the placeholder values the request carries. Only the keys the
effect in force permits are kept, redacted as the run redacts; a cache that cannot be used
(no state directory, one inside the checkout the run works in or the one the process was
started in, a file not this user's) is no cache: the model is asked, and the run's warnings
say once why there is none (as they say a store that failed), which never fails the hook.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Final

import trio

from ..core.effects import KEY_EFFECT, Effect
from ..core.hooks import Hook, SourceKind
from ..core.models import Model
from ..core.redact import Redactor
from .promptcache import CachedAnswer, PromptCache, PromptCacheError, cache_key
from .promptrun import PromptRun

#: The answer keys that are kept.
KEPT = ("run", "propose")
#: The least effect under which one of them is kept: below it nothing is ever stored under a
#: key, so nothing is looked up.
LEAST_KEPT: Final = min(KEY_EFFECT[k] for k in KEPT)


def key_for(hook: Hook, effect: Effect, model: Model, values: Mapping[str, Any]) -> str:
    return cache_key(hook.name, str(hook.target), effect.word, model.name, model.model_id, values)


def may_keep(effect: Effect) -> bool:
    """Whether an answer under `effect` can be kept, so looked up (the effect is in the key)."""
    return effect >= LEAST_KEPT


def lookup(key: str, run: PromptRun, cwd: str) -> dict[str, Any] | None:
    """The cached answer object under `key`, or None (no entry, no usable cache: the run is
    then told once why there is none, and how to have one). `cwd`: the run's, whose checkout
    is the one the cache may not lie in (`PromptCache.open`)."""
    cache = PromptCache.open(os.environ, cwd)
    if cache is None:
        run.warn_once(
            "prompt answers are not cached in this run, so each prompt hook whose answer would"
            f" be kept asks its model every run: {PromptCache.refused(os.environ, cwd)}"
        )
        return None
    entry = cache.get(key)
    return dict(entry.answer) if entry is not None else None


def worth_keeping(obj: Mapping[str, Any] | None, effect: Effect) -> bool:
    return obj is not None and any(k in obj and KEY_EFFECT[k] <= effect for k in KEPT)


async def store(
    key: str,
    hook: Hook,
    effect: Effect,
    model: Model,
    obj: Mapping[str, Any],
    *,
    redactor: Redactor,
    run: PromptRun,
    cwd: str,
) -> None:
    """Keeps the parts of `obj` the effect permits under `key` (in a worker thread: the
    write is atomic and synced)."""
    kept = {k: v for k, v in obj.items() if k in KEY_EFFECT and KEY_EFFECT[k] <= effect}
    source = hook.source
    in_file = source.kind is SourceKind.FILE
    entry = CachedAnswer(
        hook=hook.name,
        file=source.file if in_file else None,
        pointer=f"/hooks/{source.index}" if in_file else None,
        prompt=str(hook.target),
        effect=effect.word,
        model=model.shown(),
        answer=redactor.value(kept),
        created=time.time(),
    )
    cache = PromptCache.open(os.environ, cwd)
    if cache is None:
        return
    try:
        await trio.to_thread.run_sync(cache.put, key, entry)
    except (PromptCacheError, OSError) as exc:
        run.warn_once(f'the answer of prompt hook "{hook.name}" was not cached: {exc}')
