"""`init --from`: the hooks of a `.pre-commit-config.yaml` or a `lefthook.yml` as mcpx-hooks
`run` hooks, and what could not be converted, with why. No trio; the YAML is read with
PyYAML's safe loader (plain data: no tags, no objects), size-capped.

Every converted hook is `on = "script"`, `phase = "before"`, `effect = "ask"`,
`failure = "closed"` (a check that fails refuses the run, as it stops a commit), `sandbox =
"workspace"` (it may write the project, as formatters do), with its files as `when.files`.

- pre-commit: hooks of `repo: local` with `language: system` (or `script`, run by its path
  from the top). `entry` is split as pre-commit splits it (`shlex`, no shell), then `args`
  follow. `files` (a regex) becomes globs where globs say the same (`regexglob.py`), and
  `types` (`types_or`) a glob per known file type; what cannot be said is listed.
- lefthook: the `commands`, `scripts` and `jobs` (`lefthookjobs.py`) of its `pre-commit` and
  `pre-push` hooks. A `run` with nothing a shell would read is split into an argv; one that
  needs a shell (pipes, `&&`, variables, quotes, redirections) becomes `["sh", "-c", RUN]`,
  as lefthook runs it.
  `{staged_files}`-style templates are dropped (the hook gets no file list). `glob` (with
  `{a,b}` expanded) becomes `when.files` (under `root`, which becomes `cwd`). A group's
  `parallel: true` is not carried over: a hook that may refuse runs in its turn.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ..core.errors import HooksError
from ..core.places import shown_file
from ..core.records import Record
from .importnames import HookNames
from .lefthookjobs import job_entries
from .regexglob import MAX_GLOBS, brace_globs, regex_globs

#: The largest file `init --from` reads.
MAX_SOURCE_BYTES: Final = 1024 * 1024
#: The most entries it converts: YAML aliases can repeat a list many times over in few bytes.
MAX_ENTRIES: Final = 10_000
#: pre-commit's file types (`identify`'s tags) that globs say plainly.
TYPE_GLOBS: Final[Mapping[str, tuple[str, ...]]] = {
    "python": ("*.py", "*.pyi"),
    "pyi": ("*.pyi",),
    "javascript": ("*.js", "*.mjs", "*.cjs"),
    "jsx": ("*.jsx",),
    "ts": ("*.ts",),
    "tsx": ("*.tsx",),
    "json": ("*.json",),
    "yaml": ("*.yaml", "*.yml"),
    "toml": ("*.toml",),
    "markdown": ("*.md",),
    "rst": ("*.rst",),
    "shell": ("*.sh", "*.bash"),
    "go": ("*.go",),
    "rust": ("*.rs",),
    "c": ("*.c", "*.h"),
    "html": ("*.html", "*.htm"),
    "css": ("*.css",),
}
#: Tags every file (or every text file) has: they narrow nothing a glob could.
_ANY_TYPES: Final = frozenset({"file", "text"})
#: The git hooks whose moment is "before the work": where a script run's `before` is.
LEFTHOOK_HOOKS: Final = ("pre-commit", "pre-push")
_TEMPLATE: Final = re.compile(r"\{(staged_files|push_files|all_files|files|\d+|\*)\}")
_SHELL_CHARS: Final = frozenset("|&;<>()$`\\\"'*?[]#~=%{}\n")
#: pre-commit's stages (old names too) whose moment is before the work.
_STAGES: Final = {"pre-commit": "pre-commit", "commit": "pre-commit", "pre-push": "pre-push",
                  "push": "pre-push"}  # fmt: skip
#: Why a pre-commit language other than `system`, `script` and `fail` is not converted.
_BUILT: Final = (
    "needs an environment pre-commit builds; install what it needs and declare it as a run hook"
)
_LANGUAGES: Final = {
    "pygrep": "searches the files pre-commit passes it, which a run hook here does not get;"
    " declare a run hook that finds and searches them itself (git grep -P)",
}
#: A lefthook entry's keys that have no counterpart here (each noted on its hook).
_LEFTHOOK_UNSAID: Final = (
    "exclude", "skip", "only", "env", "tags", "interactive", "stage_fixed", "fail_text",
)  # fmt: skip
#: A lefthook config's keys that bring hooks from elsewhere, which are not converted.
_LEFTHOOK_ELSEWHERE: Final = {
    "extends": "the hooks of the files it extends are not converted; convert each by itself"
    " (init --from FILE in another directory) and copy its hooks here",
    "remotes": "the hooks of remote repositories, which lefthook fetches itself, are not"
    " converted; install what they run and declare them as run hooks",
}
#: A pre-commit config's filters of every hook, and why they are not carried over.
_TOP_FILTERS: Final = {
    "files": "write it into each hook's when.files by hand",
    "exclude": "when.files has no exclusion: its hooks also run for changes there",
}


class SourceFileError(HooksError):
    """The file cannot be read as the format it is named for: nothing is written."""


@attrs.frozen(repr=False, eq=False)
class Converted(Record):
    """What `init --from` makes of a file: the hooks, as TOML tables would hold them, each
    with its comment lines; and each entry not converted, with why."""

    hooks: tuple[tuple[Mapping[str, Any], tuple[str, ...]], ...]
    skipped: tuple[str, ...]


def read_yaml(path: Path) -> Any:
    """The file's data by PyYAML's safe loader; `SourceFileError` naming the file for anything
    that is not a small, valid YAML document."""
    import yaml

    shown = shown_file(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise SourceFileError(f"{shown}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_SOURCE_BYTES:
        raise SourceFileError(
            f"{shown}: over {MAX_SOURCE_BYTES} bytes; not a hook manager's config"
        )
    try:
        return yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SourceFileError(f"{shown}: not UTF-8 text (byte {exc.start})") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SourceFileError(f"{shown}: not valid YAML{where}: {exc.problem}") from None
    except RecursionError:
        raise SourceFileError(f"{shown}: not valid YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        raise SourceFileError(f"{shown}: not valid YAML: {type(exc).__name__}") from None


def _count(source: str, seen: list[int]) -> None:
    """One more entry; `SourceFileError` past `MAX_ENTRIES`."""
    seen[0] += 1
    if seen[0] > MAX_ENTRIES:
        raise SourceFileError(f"{source}: over {MAX_ENTRIES} hook entries; not converted")


def _base(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "on": "script",
        "phase": "before",
        "effect": "ask",
        "failure": "closed",
        "sandbox": "workspace",
    }


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _type_globs(hook: Mapping[str, Any]) -> tuple[list[str] | None, str | None]:
    """`types`/`types_or` as globs (None: no narrowing), or why they cannot be said."""
    types = [t for t in _strings(hook.get("types", [])) or [] if t not in _ANY_TYPES]
    types_or = [t for t in _strings(hook.get("types_or", [])) or [] if t not in _ANY_TYPES]
    if len(types) > 1:
        return None, f"types {types} (all at once) has no glob"
    wanted = [*types_or, *types] if not types or not types_or else None
    if wanted is None:
        return None, "types and types_or together have no glob"
    unknown = [t for t in wanted if t not in TYPE_GLOBS]
    if unknown:
        return None, f"file type(s) {unknown} have no glob here"
    globs = dict.fromkeys(g for t in wanted for g in TYPE_GLOBS[t])  # (python and pyi: one *.pyi)
    return (list(globs) or None), None


def _precommit_files(hook: Mapping[str, Any], notes: list[str]) -> list[str] | None:
    """`files` and `types` as `when.files` (None: every change), each thing lost noted."""
    if hook.get("always_run") is True:
        return None
    by_type, why = _type_globs(hook)
    if why is not None:
        notes.append(f"{why}: when.files leaves it out")
    files = hook.get("files")
    by_files = None
    if isinstance(files, str) and files not in ("", "^$", ".*"):
        by_files = regex_globs(files)
        if by_files is None:
            notes.append(f"files regex {files!r} has no exact glob: write when.files by hand")
    if by_files is None or by_type is None:
        return by_files or by_type
    if all(f.endswith("/**") for f in by_files) and all(t.startswith("*") for t in by_type):
        return [f"{f}/{t}" for f in by_files for t in by_type]
    notes.append("files and types together: when.files keeps files only")
    return by_files


def from_precommit(data: Any, source: str) -> Converted:
    """The local `system`/`script` hooks of a pre-commit config (module docstring)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("repos"), list):
        raise SourceFileError(
            f"{source}: not a pre-commit config (expected a top-level repos list)"
        )
    hooks: list[tuple[Mapping[str, Any], tuple[str, ...]]] = []
    skipped = [
        f"{key} {data[key]!r} (of every hook): not converted, {why}"
        for key, why in _TOP_FILTERS.items()
        if isinstance(data.get(key), str) and data[key] not in ("", "^$", ".*")
    ]
    stages = _strings(data.get("default_stages", ["pre-commit"])) or ["pre-commit"]
    taken = HookNames("id")
    seen = [0]
    for r, repo in enumerate(data["repos"]):
        _count(source, seen)
        if not isinstance(repo, Mapping) or not isinstance(repo.get("hooks"), list):
            skipped.append(f"repos[{r}]: not a repository entry with hooks")
            continue
        url = repo.get("repo")
        for h, hook in enumerate(repo["hooks"]):
            _count(source, seen)
            where = f"repos[{r}].hooks[{h}]"
            ident = hook.get("id") if isinstance(hook, Mapping) else None
            label = f"{where} ({ident})" if isinstance(ident, str) else where
            if url != "local":
                skipped.append(
                    f"{label}: from {url}, which pre-commit installs itself; install the tool"
                    " and declare it as a run hook"
                )
                continue
            if not isinstance(hook, Mapping) or not isinstance(ident, str):
                skipped.append(f"{label}: not a hook with an id")
                continue
            converted = _precommit_hook(hook, label, taken, stages)
            if isinstance(converted, str):
                skipped.append(converted)
            else:
                hooks.append(converted)
    return Converted(tuple(hooks), tuple(skipped))


def _precommit_hook(
    hook: Mapping[str, Any], label: str, taken: HookNames, default_stages: list[str]
) -> tuple[Mapping[str, Any], tuple[str, ...]] | str:
    language = hook.get("language")
    if language not in ("system", "script", "fail"):
        why = _LANGUAGES.get(str(language), _BUILT)
        return f"{label}: language {language!r} {why}"
    stages = _strings(hook.get("stages", default_stages)) or []
    when = [s for s in stages if s in _STAGES]
    if stages and not when:
        return f"{label}: stages {stages} have no moment in a script run (only pre-commit/push)"
    entry, args = hook.get("entry"), _strings(hook.get("args", []))
    if not isinstance(entry, str) or args is None:
        return f"{label}: entry is not a string, or args not a list of strings"
    if language == "fail":  # its entry is the message; it fails wherever its files match
        argv = ["sh", "-c", 'printf "%s\\n" "$1"; exit 1', "fail", entry]
    else:
        try:
            argv = shlex.split(entry) + args
        except ValueError as exc:
            return f"{label}: entry {entry!r} cannot be split into words ({exc})"
    if not argv:
        return f"{label}: entry is empty"
    if language == "script" and not argv[0].startswith(("/", "./", "../")):
        argv[0] = "./" + argv[0]  # a file of the repository, from its top
    notes: list[str] = []
    if {_STAGES[s] for s in when} == {"pre-push"}:
        notes.append("pre-commit ran it before a push; here it runs before every run")
    name, renamed = taken(hook["id"])
    notes += [renamed] if renamed else []
    obj = {**_base(name), "run": argv}
    files = _precommit_files(hook, notes)
    if files:
        obj["when"] = {"files": files}
    if hook.get("exclude"):
        notes.append(f"exclude {hook['exclude']!r} not converted: when.files has no exclusion")
    if hook.get("pass_filenames", True) is not False and language != "fail":
        notes.append("pre-commit passed it the matching files; here it gets none as arguments")
    return obj, (f"from {label}: {hook.get('name', hook['id'])}", *notes)


def _needs_shell(run: str) -> bool:
    return bool(_SHELL_CHARS & set(run))


def from_lefthook(data: Any, source: str) -> Converted:
    """The `pre-commit`/`pre-push` commands and scripts of a lefthook config."""
    if not isinstance(data, Mapping):
        raise SourceFileError(f"{source}: not a lefthook config (expected a mapping at the top)")
    hooks: list[tuple[Mapping[str, Any], tuple[str, ...]]] = []
    skipped: list[str] = []
    taken = HookNames("name")
    seen = [0]
    skipped += [f"{key}: {why}" for key, why in _LEFTHOOK_ELSEWHERE.items() if data.get(key)]
    for git_hook, group in data.items():
        _count(source, seen)
        if not isinstance(group, Mapping) or not ({"commands", "scripts", "jobs"} & set(group)):
            continue  # a setting (min_version, colors, …), not a hook
        if git_hook not in LEFTHOOK_HOOKS:
            skipped.append(f"{git_hook}: a git hook with no moment in a script run")
            continue
        if group.get("parallel") is True:
            skipped.append(
                f"{git_hook}.parallel: its hooks may refuse the run, so they run in turn (set"
                ' effect = "advise" and parallel = true on those that need not refuse)'
            )
        listed: list[tuple[str, str, Any, str]] = []
        for kind in ("commands", "scripts"):
            entries = group.get(kind) or {}
            if not isinstance(entries, Mapping):
                skipped.append(f"{git_hook}.{kind}: not a mapping")
                continue
            listed += [(kind, str(n), e, f"{git_hook}.{kind}.{n}") for n, e in entries.items()]
        jobs, not_jobs = job_entries(git_hook, group["jobs"]) if "jobs" in group else ([], [])
        skipped += not_jobs
        for kind, name, entry, label in listed + jobs:
            _count(source, seen)
            done = _lefthook_entry(git_hook, kind, name, entry, label, taken)
            if isinstance(done, str):
                skipped.append(done)
            else:
                hooks.append(done)
    return Converted(tuple(hooks), tuple(skipped))


def _lefthook_entry(  # noqa: PLR0917
    git_hook: str, kind: str, name: str, entry: Any, label: str, taken: HookNames
) -> tuple[Mapping[str, Any], tuple[str, ...]] | str:
    if not isinstance(entry, Mapping):
        return f"{label}: not a mapping"
    if entry.get("skip") is True:
        return f"{label}: skip: true, lefthook never runs it"
    notes: list[str] = [f"from {label}"]
    if kind == "scripts":
        runner = entry.get("runner")
        if not isinstance(runner, str) or not runner.split():
            return f"{label}: a script without a runner"
        argv = [*runner.split(), f".lefthook/{git_hook}/{entry.get('script', name)}"]
    else:
        run = entry.get("run")
        if not isinstance(run, str) or not run.strip():
            return f"{label}: no run command"
        if _TEMPLATE.search(run):
            notes.append("its file templates were dropped: here it gets no file list")
            run = " ".join(_TEMPLATE.sub("", run).split())
        if _needs_shell(run):
            argv = ["sh", "-c", run]
            notes.append("it needs a shell, as lefthook runs it: sh -c")
        else:
            argv = run.split()
        if not argv:
            return f"{label}: only file templates, no command"
    hook_name, renamed = taken(name)
    notes += [renamed] if renamed else []
    obj: dict[str, Any] = {**_base(hook_name), "run": argv}
    root = entry.get("root")
    root = root.strip("/") if isinstance(root, str) else ""
    globs: list[str] = []
    for glob in _strings(entry.get("glob")) or []:
        if (expanded := brace_globs(glob)) is None:
            notes.append(f"glob {glob!r} makes over {MAX_GLOBS} globs: write when.files by hand")
            globs = []
            break
        globs += expanded
    if root:  # lefthook matches a root's files within it: the same, from the top
        globs = [f"{root}/{g}" if "/" in g else f"{root}/**/{g}" for g in globs]
        obj["cwd"] = root
    if globs:
        obj["when"] = {"files": globs}
    if "files" in entry:
        notes.append(
            "files (its own command listing the files) not converted: when.files uses git's"
        )
    for key in _LEFTHOOK_UNSAID:
        if key in entry:
            notes.append(f"{key} not converted")
    if git_hook == "pre-push":
        notes.append("lefthook ran it before a push; here it runs before every run")
    return obj, tuple(notes)
