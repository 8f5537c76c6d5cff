"""Variables passed by name: `passEnv` globs and `secrets` names, looked up in the
environment they come from, and the rule that an `env` value is literal.

Pure: no trio, no I/O. Where a hook's or a run's variables come from is the caller's choice
(`run/`): the supervisor's environment for hooks its config declares, the caller's for a
run and its per-call hooks. What is found here is what the hook or run gets; the secrets
among it are what the run's redaction hides (`redact.py`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Final

import attrs

from .records import Record

#: The fewest characters a secret's value may have: a shorter one would be rewritten
#: wherever those few characters happen to stand (every "abc" in every frame), so it is
#: refused instead, like an unset one.
MIN_SECRET_CHARS: Final = 4

#: The config keys (on a hook, under `[script]`) and the exec request's fields.
PASS_ENV_KEY: Final = "passEnv"
SECRETS_KEY: Final = "secrets"

#: The variable a client reads the server's token from (`--token-file` not given).
TOKEN_ENV: Final = "MCPX_HOOKS_TOKEN"
#: The OpenTelemetry exporter's headers (docs/telemetry.md): an API key, often, for the
#: supervisor's own export.
OTLP_HEADERS_ENV: Final = tuple(
    f"OTEL_EXPORTER_OTLP_{signal}HEADERS" for signal in ("", "TRACES_", "METRICS_", "LOGS_")
)
#: The variables the supervisor holds as its own secrets, whatever the config: no `passEnv`
#: glob or name passes them to a hook, a script, a tool server or a remote server (a child
#: that needs one names it in `secrets`, and its value is then redacted). A model's
#: `apiKeyEnv` joins them where the config is known (`Models.key_names`).
OWN_SECRETS: Final = frozenset({TOKEN_ENV, *OTLP_HEADERS_ENV})

#: What looks like a variable reference in an `env` value: it is never expanded.
_REFERENCE: Final = re.compile(r"\$\{([^}\s]*)\}")


#: A secret's name: a variable name (`spawntext.ENV_NAME_PATTERN`) without a glob's `*`, `?`
#: or `[`. A secret is one variable, named; `passEnv` takes globs.
SECRET_NAME_PATTERN: Final = "^[^=*?\\[\\u0000\\ud800-\\udfff]+$"
_GLOB: Final = re.compile(r"[*?\[]")


def secret_name_problem(name: str) -> str | None:
    """Why `name`, a variable name, cannot name a secret (a glob), or None."""
    if _GLOB.search(name) is None:
        return None
    return f"{name!r} is a glob: a secret is one variable, named (passEnv takes globs)"


def secret_unset(name: str) -> str:
    """Why a hook or run with an unset secret did not run."""
    return f"secret {shown_name(name)} is not set"


#: What a variable's name is written as, in practice: a name unlike it, in a place that takes
#: a secret's name, is likely the secret itself, pasted (`sk-proj-…`).
_VARIABLE_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: Keys in the shapes their issuers publish, each a prefix and a long token no name has:
#: model APIs' (`sk-…`: OpenAI, Anthropic, DeepSeek, OpenRouter; xAI's `xai-…`, Perplexity's
#: `pplx-…`, Google's `AIza…`, Hugging Face's `hf_…`, Groq's `gsk_…`), GitHub's tokens (`ghp_`
#: and its kin; fine-grained `github_pat_…`) and AWS's access key ids (`AKIA` or `ASIA` and 16
#: more). Those with `-` cannot be a shell's variable; the others could, but none is one.
_KEY_SHAPES: Final = re.compile(
    r"(?:sk|xai|pplx)-[A-Za-z0-9_-]{20,}|AIza[A-Za-z0-9_-]{30,}|hf_[A-Za-z0-9]{30,}"
    r"|gsk_[A-Za-z0-9]{40,}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|(?:AKIA|ASIA)[A-Z0-9]{16}"
)
#: A key's random token, in any other shape: a run of letters and digits this long, with
#: digits in two places or more. A name's words are short (`OPENAI_API_KEY`); written
#: together (`openAiGpt4oApiKeyProduction2`) they stay shorter than this.
_KEY_WORD_CHARS: Final = 32
_WORD: Final = re.compile(r"[A-Za-z0-9]+")
_DIGITS: Final = re.compile(r"[0-9]+")


def looks_like_key(name: str) -> bool:
    """Whether `name`, written where a variable's name goes, reads as a key rather than a
    name: in a key's published shape (`_KEY_SHAPES`), or holding a random token
    (`_KEY_WORD_CHARS` letters and digits in a row, digits in two places or more)."""
    if _KEY_SHAPES.fullmatch(name):
        return True
    return any(
        len(word) >= _KEY_WORD_CHARS and len(_DIGITS.findall(word)) > 1
        for word in _WORD.findall(name)
    )


#: A glob of variables' names (`TOKEN_*`, `KEY_[AB]`), which `passEnv` takes and a secret's
#: name does not: a copied pattern, said as written (no key is written so).
_NAME_GLOB: Final = re.compile(r"[A-Za-z_*?\[][A-Za-z0-9_*?\[\]!-]{0,63}")


def _name_glob(given: str) -> bool:
    """Whether `given`, refused as a secret's name, is a glob of names (shown as written)
    rather than what may be the secret itself (`unshown`)."""
    return (
        bool(_NAME_GLOB.fullmatch(given))
        and bool(_GLOB.search(given))
        and not looks_like_key(given)
    )


def unshown(given: str) -> str:
    """What is written where a secret's name goes, refused, in words that do not repeat it:
    it may be the secret itself, pasted (a config problem's "found …"); "" for a glob of
    names (`TOKEN_*`, copied from `passEnv`) or a variable's name (`secrets = "GITHUB_TOKEN"`,
    not in a list), which the caller quotes as written."""
    if _name_glob(given) or shown_name(given) == given:
        return ""
    return f"a string of {len(given)} characters (not shown: it may be the secret itself)"


def shown_name(name: str) -> str:
    """`name`, a secret's variable, as a message about it may say it: itself when it reads
    as a variable's name, else words that do not repeat it (messages reach frames and the
    history, and an unset "name" like `sk-proj-…` or `ghp_…` is most likely the key, pasted)."""
    if looks_like_key(name):
        return "(a name not shown: it is written as a key is; is it the value itself?)"
    if _VARIABLE_NAME.fullmatch(name):
        return name
    return "(a name not shown: it is not written as a variable's; is it the value itself?)"


def secret_too_short(name: str, length: int) -> str:
    return (
        f"secret {shown_name(name)} is too short to redact ({length} characters; a secret has"
        f" at least {MIN_SECRET_CHARS})"
    )


def reference_problem(value: str, *, flags: bool = False) -> str | None:
    """Why an `env` value that looks like `${NAME}` is refused, with what to write instead
    (`flags`: as `exec` options rather than config keys); None for a literal value."""
    found = _REFERENCE.search(value)
    if found is None:
        return None
    name = found.group(1) or "NAME"
    if flags:
        instead = f"--pass-env {name} (or --secret {name} for a secret)"
    else:
        instead = f'{PASS_ENV_KEY} = ["{name}"] (or {SECRETS_KEY} = ["{name}"] for a secret)'
    return (
        f"env values are literal strings and {found.group(0)} is never expanded; to pass the"
        f" variable, write {instead}"
    )


@attrs.frozen(repr=False, eq=False)
class Passed(Record):
    """What `passEnv` and `secrets` found: every variable passed (secrets too), the secrets
    among them, and why the hook or run must not run (`problem`), if it must not."""

    values: Mapping[str, str] = attrs.field(factory=dict)
    secrets: Mapping[str, str] = attrs.field(factory=dict)
    problem: str | None = None


NOTHING_PASSED: Final = Passed()


def _globbed(name: str, globs: tuple[str, ...], withheld: Collection[str]) -> bool:
    """Whether `passEnv` `globs` pass `name`: never one of the supervisor's own secrets."""
    if name in OWN_SECRETS or name in withheld:
        return False
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def withheld_matches(globs: Iterable[str], withheld: Collection[str] = ()) -> list[tuple[str, str]]:
    """Each `(glob, name)` where a `passEnv` glob would match one of the supervisor's own
    secrets (`OWN_SECRETS` and `withheld`), which it never passes: what `validate` warns of."""
    names = sorted(OWN_SECRETS | frozenset(withheld))
    return [(g, n) for g in globs for n in names if fnmatch.fnmatchcase(n, g)]


def pass_environment(
    globs: Iterable[str],
    secret_names: Iterable[str],
    source: Mapping[str, str],
    *,
    withheld: Collection[str] = (),
) -> Passed:
    """The variables of `source` that `globs` match (case-sensitive `fnmatch`) and that
    `secret_names` name exactly. The supervisor's own secrets (`OWN_SECRETS`, and the
    `withheld` names: the models' keys) are never matched by a glob, only named as secrets.
    A secret that `source` lacks, or whose value is shorter than `MIN_SECRET_CHARS`, is the
    `problem` (the first one, in declared order)."""
    globs, names = tuple(globs), tuple(secret_names)
    if not globs and not names:
        return NOTHING_PASSED
    values = {name: source[name] for name in sorted(source) if _globbed(name, globs, withheld)}
    secrets: dict[str, str] = {}
    problem = None
    for name in names:
        value = source.get(name)
        if value is None:
            problem = problem or secret_unset(name)
        elif len(value) < MIN_SECRET_CHARS:
            problem = problem or secret_too_short(name, len(value))
        else:
            secrets[name] = value
    return Passed({**values, **secrets}, secrets, problem)


def wanted(
    globs: Iterable[str],
    secret_names: Iterable[str],
    source: Mapping[str, str],
    *,
    withheld: Collection[str] = (),
) -> dict[str, str]:
    """The part of `source` that `globs` and `secret_names` would take: what a remote caller
    sends of its environment (and nothing else of it: never its own token to a glob)."""
    globs, names = tuple(globs), frozenset(secret_names)
    return {
        name: value
        for name, value in source.items()
        if name in names or _globbed(name, globs, withheld)
    }
