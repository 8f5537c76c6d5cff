"""lefthook's `jobs` (its form since 1.10) as the entries `importers.py` converts: a job that
runs a command is a `commands` entry, one that runs a script (with its `runner`) a `scripts`
entry, named by its `name`, else by its script, else `job-N` (its place among the hook's jobs,
from 1). A job
with a `group` gives the group's jobs, each with the group's `root`, `glob` and `exclude`
where it has none of its own (as lefthook applies them), nested groups included. What is
not a job is listed with why, as is a group's `parallel`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: A group's keys that its jobs take, where they have none of their own.
_INHERITED: Final = ("root", "glob", "exclude")


def job_entries(
    git_hook: str, jobs: Any
) -> tuple[list[tuple[str, str, Mapping[str, Any], str]], list[str]]:
    """(kind, name, entry, label) of each job of `git_hook` to convert, in order, and why each
    other one is not."""
    entries: list[tuple[str, str, Mapping[str, Any], str]] = []
    skipped: list[str] = []
    _walk(git_hook, jobs, f"{git_hook}.jobs", {}, entries, skipped)
    return entries, skipped


def _walk(  # noqa: PLR0917
    git_hook: str,
    jobs: Any,
    where: str,
    inherited: Mapping[str, Any],
    entries: list[tuple[str, str, Mapping[str, Any], str]],
    skipped: list[str],
) -> None:
    if not isinstance(jobs, list):
        skipped.append(f"{where}: not a list of jobs")
        return
    for i, job in enumerate(jobs):
        named = job.get("name") if isinstance(job, Mapping) else None
        label = f"{where}[{i}]" + (f" ({named})" if isinstance(named, str) else "")
        if not isinstance(job, Mapping):
            skipped.append(f"{label}: not a mapping")
            continue
        own = {**inherited, **{k: job[k] for k in _INHERITED if k in job}}
        group = job.get("group")
        if isinstance(group, Mapping):
            if group.get("parallel") is True:
                skipped.append(
                    f"{label}.group.parallel: its hooks may refuse the run, so they run in turn"
                )
            _walk(git_hook, group.get("jobs"), f"{label}.group.jobs", own, entries, skipped)
            continue
        kind = "commands" if "run" in job else "scripts" if "script" in job else None
        if kind is None:
            skipped.append(f"{label}: a job with no run, script or group")
            continue
        script = job.get("script") if kind == "scripts" else None
        name = next((n for n in (named, script) if isinstance(n, str)), f"job-{len(entries) + 1}")
        entries.append((kind, name, {**job, **own}, label))
