"""The readable view: what a person sees of frames and hooks on a terminal. Pure text."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

from .frames import HookFrame, HookStatus
from .hooks import Hook

#: How many trailing lines of stderr the readable view shows for a failed hook.
STDERR_LINES: Final = 8


def hook_frame_lines(frame: HookFrame) -> list[str]:
    """A hook frame as a few lines: outcome first, then effect, changes and evidence."""
    mark = {HookStatus.OK: "ok", HookStatus.SKIPPED: "skipped"}.get(frame.status, "FAILED")
    head = (
        f"hook {frame.name} ({frame.on}.{frame.phase}, {frame.action}, sandbox {frame.sandbox})"
        f": {mark}"
    )
    if frame.status.is_failure:
        head += f" [{frame.status}]"
    lines = [f"{head} in {frame.duration_ms} ms"]
    effect = f"effect {frame.effect}"
    if frame.clamped_by:
        effect += f" (requested {frame.requested_effect}; lowered by {', '.join(frame.clamped_by)})"
    lines.append(f"  {effect}")
    if frame.reason:
        lines.append(f"  why: {frame.reason}")
    if frame.refused:
        how = "fail-closed" if frame.refused.get("failClosed") else "the hook said no"
        lines.append(f"  REFUSES the run ({how}): {frame.refused['reason']}")
    elif frame.status.is_failure:
        lines.append("  failure is open: the run carries on")
    if frame.failure_note:
        lines.append(f"  note: {frame.failure_note}")
    lines.extend(f"  advice: {a}" for a in frame.advice)
    if frame.ask:
        lines.append(
            f"  asks: {frame.ask['question']} (default {frame.ask['default']}, "
            f"deadline {frame.ask['deadlineMs']} ms; unanswered takes the default)"
        )
    lines.extend(f"  proposes: {_short(p.get('value'))}" for p in frame.proposals)
    if frame.changed:
        lines.append(f"  applies: {_short(frame.original)} -> {_short(frame.value)}")
    lines.extend(f"  dropped: {d['key']} ({d['reason']})" for d in frame.dropped)
    if frame.ran is not None:
        lines.append(f"  ran {' '.join(frame.ran.argv)}: {frame.ran.status}")
    if frame.exit_code not in (None, 0) or frame.signal is not None:
        lines.append(f"  exit code {frame.exit_code}, signal {frame.signal}")
    if frame.status.is_failure and frame.stderr_tail:
        tail = frame.stderr_tail.rstrip("\n").splitlines()[-STDERR_LINES:]
        lines.append("  stderr (last lines):")
        lines.extend(f"    | {line}" for line in tail)
    return lines


def hook_table(hooks: Iterable[Hook]) -> list[str]:
    """`hooks list` for a person: one line a hook, with where it came from."""
    rows = [("NAME", "POINT.PHASE", "ACTION", "EFFECT", "FAILURE", "TIMEOUT", "SOURCE")]
    for h in hooks:
        src = h.source.to_json()
        where = f"{src['file']}#{src['index']}" if isinstance(src, dict) else src
        name = h.name if h.enabled else f"{h.name} (disabled)"
        rows.append(
            (
                name,
                f"{h.on}.{h.phase}",
                h.action.value,
                h.effect.word,
                h.failure.value,
                f"{h.timeout_ms} ms",
                where,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in rows
    ]


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."
