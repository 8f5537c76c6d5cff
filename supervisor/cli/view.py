"""The readable view: what a person sees of frames and hooks on a terminal. Pure text.

What it shows of a frame is data (`printable.py`): free of control characters, a text of
several lines as indented continuation lines; a script's own output lines are the exception,
shown as they are."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .printable import (
    MESSAGE_CHARS,
    bounded,
    command,
    continued_lines,
    cut_line,
    left_out,
    printable,
)

#: How many trailing lines of stdout and of stderr the readable view shows for a failed hook.
STDERR_LINES: Final = 8
#: How many leading lines of stdout it shows for a hook whose output could not be read.
STDOUT_LINES: Final = 8
#: How many lines of a hook's advice it shows (the rest counted; `--json` has all of it).
ADVICE_LINES: Final = 20
#: Every other field of data a view shows is `printable.bounded`: `FIELD_LINES` lines of at
#: most `LINE_CHARS` characters; each line of a hook's output and of its advice is cut there.
#: What a command line cut short is said to be.
ARGV: Final = "its command line"


def hook_frame_lines(frame: Mapping[str, Any], *, verbose: bool = False) -> list[str]:
    """A hook frame (wire form) as a few lines: outcome, effect, changes and evidence;
    `verbose`: what its process used too (`used_line`)."""
    return continued_lines(_hook_lines(frame, verbose))


def used_line(frame: Mapping[str, Any]) -> str | None:
    """What a hook's process used, for a person who asks for detail (`runs show
    --verbose`): `used 12 ms of CPU, 9.8 MiB of memory at most`; None where the frame does
    not say (a plugin, prompt or skipped hook runs no process of its own)."""
    from ..core.amounts import shown_size

    used = frame.get("resources")
    if not isinstance(used, Mapping):
        return None
    cpu, rss = used.get("cpuMs"), used.get("maxRssKb")
    if not isinstance(cpu, int) or not isinstance(rss, int):
        return None
    return f"  used {cpu} ms of CPU, {shown_size(rss * 1024)} of memory at most"


def _hook_lines(frame: Mapping[str, Any], verbose: bool = False) -> list[str]:
    # Imported here: `hooks list` uses this module without frames (and so without cattrs).
    from ..core.frames import HOOK_NOTES, RUN_CANCELLED_REASON, HookStatus

    status = HookStatus(frame["status"])
    mark = {HookStatus.OK: "ok", HookStatus.SKIPPED: "skipped"}.get(status, "FAILED")
    action = frame["action"]
    if frame.get("server") and frame.get("tool"):  # a plugin hook: whose tool answered
        action = f"{action} {frame['server']}.{frame['tool']}"
    where = f"{frame['on']}.{frame['phase']}, {action}, sandbox {frame['sandbox']}"
    head = printable(f"hook {frame['name']} ({where})") + f": {mark}"
    if status.is_failure:
        head += f" [{status}]"
    lines = [f"{head} in {frame['durationMs']} ms"]
    effect = f"effect {frame['effect']}"
    if frame["clampedBy"]:
        effect += (
            f" (requested {frame['requestedEffect']}; lowered by {', '.join(frame['clampedBy'])})"
        )
    if frame.get("callerAutonomyIgnored"):
        effect += "; locked: the caller's hooks.autonomy does not lower it"
    lines.append(f"  {effect}")
    if verbose and (used := used_line(frame)) is not None:
        lines.append(used)
    if frame.get("model"):  # a prompt hook's model and what it cost
        model, tokens = frame["model"], frame.get("tokens")
        said = f"  model {model['name']} ({model['provider']} {model['model']})"
        if frame.get("cached"):
            said += ": the cached answer, the model not asked"
        elif tokens:
            said += f": {tokens['prompt']}+{tokens['completion']} tokens"
            said += f" in {frame['latencyMs']} ms" if frame.get("latencyMs") is not None else ""
        lines.append(said)
    if frame.get("reason"):
        lines.append(f"  why: {bounded(frame['reason'])}")
    refused = frame.get("refused")
    what = "call" if frame["on"] == "call" else "run"
    if refused:
        how = "fail-closed" if refused.get("failClosed") else "the hook said no"
        lines.append(f"  REFUSES the {what} ({how}): {bounded(refused['reason'])}")
    elif status.is_failure and not str(frame.get("reason")).startswith(RUN_CANCELLED_REASON):
        lines.append(f"  failure is open: the {what} carries on")
    lines.extend(f"  note: {bounded(frame[k])}" for k in HOOK_NOTES if frame.get(k))
    lines.extend(_advice_lines(frame.get("advice", ())))
    asked = frame.get("asked")
    if asked:
        told = f"{asked['answer']} (by {asked['by']})" if asked.get("answer") else "not answered"
        lines.append(f"  asked: {bounded(asked['question'], after=f' -> {told}')}")
    lines.extend(f"  proposes: {_proposal(p)}" for p in frame.get("proposals", ()))
    if frame.get("changed"):
        lines.append(f"  applies: {_short(frame.get('original'))} -> {_short(frame.get('value'))}")
    for d in frame.get("dropped", ()):
        lines.append(f"  dropped: {bounded(d['key'], 1, after=' (' + d['reason'] + ')')}")
    lines.extend(f"  egress: {bounded(said)}" for said in frame.get("egress", ()))
    ran = frame.get("ran")
    if ran is not None:
        lines.extend(_ran_lines(ran))
    ended = _exit(frame.get("exitCode"), frame.get("signal"))
    if ended is not None and ended != frame.get("reason"):  # (not said twice)
        lines.append(f"  {ended}")
    if frame.get("stdoutHead"):
        head = frame["stdoutHead"].rstrip("\n").splitlines()
        lines.append(f"  {answer_word(frame['action'])} (first lines):")
        lines.extend(_output_lines(head[:STDOUT_LINES], max(0, len(head) - STDOUT_LINES)))
    if status.is_failure:
        # What a failed hook said, under its failure: where "jq is missing: …" is written.
        for stream in ("stdout", "stderr"):
            kept = frame.get(f"{stream}Tail")
            if kept and kept != frame.get("stdoutHead"):
                tail = kept.rstrip("\n").splitlines()[-STDERR_LINES:]
                lines.append(f"  {stream} (last lines):")
                lines.extend(_output_lines(tail))
    return lines


def answer_word(action: str) -> str:
    """What a hook of `action` answers with, as its frame's words name it: `stdout` for a
    process, or a kind's own (`the model's answer`); `stdout` for a kind this build lacks."""
    from ..core.kinds import HOOK_KINDS, PROCESS_ANSWER

    kind = HOOK_KINDS.get(action)
    return PROCESS_ANSWER if kind is None else kind.answer


def _ran_lines(ran: Mapping[str, Any]) -> list[str]:
    """What a `run` answer's command did: its line (status, how it ended, how long it took),
    and, when it failed, the start of its stdout and the end of its stderr (where it said
    why, or why it could not start), bounded as a hook's own output is."""
    from ..core.frames import HookStatus

    took = ran.get("durationMs")
    lasted = f" in {took} ms" if isinstance(took, int) else ""
    code, signal = ran.get("exitCode"), ran.get("signal")
    how = (
        f" (killed by signal {signal})"
        if isinstance(signal, int)
        else f" (exit {code})"
        if isinstance(code, int) and code != 0
        else ""
    )
    said = f": {ran['status']}{how}{lasted}"
    lines = [f"  ran {bounded(_argv(ran['argv']), 1, after=said, what=ARGV)}"]
    try:
        failed = HookStatus(ran["status"]).is_failure
    except ValueError:
        failed = True
    if not failed:
        return lines
    if ran.get("stdout"):
        head = ran["stdout"].rstrip("\n").splitlines()
        lines.append("  ran's stdout (first lines):")
        lines.extend(_output_lines(head[:STDOUT_LINES], max(0, len(head) - STDOUT_LINES)))
    if ran.get("stderrTail"):
        lines.append("  ran's stderr (last lines):")
        lines.extend(_output_lines(ran["stderrTail"].rstrip("\n").splitlines()[-STDERR_LINES:]))
    return lines


def _proposal(proposal: Mapping[str, Any]) -> str:
    """A proposal as its line shows it: its value (short JSON) and the hook's note on it."""
    value = _short(proposal.get("value"))
    note = proposal.get("note")
    return value if note in (None, "") else f"{value} (note: {bounded(str(note), after=')')}"


def _output_lines(said: Sequence[str], more: int = 0) -> list[str]:
    """Lines a hook printed, each cut at `LINE_CHARS`, and how much of them was left out
    (`more` lines after them, and the characters cut)."""
    lines, cut = [], 0
    for line in said:
        shown, left = cut_line(line)
        lines.append(f"    | {shown}")
        cut += left
    mark = left_out(more, cut)
    return [*lines, f"    {mark}"] if mark else lines


def _advice_lines(advice: Sequence[str]) -> list[str]:
    """A hook's advice, its first `ADVICE_LINES` lines (a line break in the text as
    `printable.continued` breaks it), each cut at `LINE_CHARS`, and how much more there is."""
    lines, left, more, cut = [], ADVICE_LINES, 0, 0
    for text in advice:
        parts = text.splitlines() or [""]
        if left:
            shown = [cut_line(part) for part in parts[:left]]
            lines.append("  advice: " + "\n".join(line for line, _ in shown))
            cut += sum(n for _, n in shown)
        more += max(0, len(parts) - left)
        left = max(0, left - len(parts))
    if mark := left_out(more, cut, "advice"):
        lines.append(f"  {mark}")
    return lines


def _advised(outcome: Mapping[str, Any]) -> list[str]:
    """The advice a run's outcome gathers: each piece is its hook's, shown under that hook's
    line already, so here it is only counted."""
    count = len(outcome.get("advice", ()))
    if not count:
        return []
    pieces = "1 piece" if count == 1 else f"{count} pieces"
    return [f"  advice: {pieces}, shown under the hooks that gave it"]


def _exit(code: Any, signal: Any) -> str | None:
    """How a process ended, in words; None for a clean exit or when nothing is known."""
    if signal is not None:
        return f"killed by signal {signal}"
    if code not in (None, 0):
        return f"exited with status {code}"
    return None


def _argv(argv: Any) -> str:
    """A command line as the view shows it: on one line, quoted as a shell would take it
    back, as `runs list` shows it (`sh -c 'a; b'`, not `sh -c a; b`)."""
    if not isinstance(argv, list | tuple):
        return cell(argv)
    return command(argv)


def frame_lines(frame: Mapping[str, Any], *, verbose: bool = False) -> list[str]:
    """Any run frame (wire form) for a person, as it happens. The set of types is open: one
    this view does not know is one line, its type and its fields (`other_frame_line`). A
    script's output line is shown as it is; everything else as data (`printable.py`).
    `verbose`: a hook's line says what its process used (`used_line`)."""
    from ..core.frames import FrameType

    match frame.get("type"):
        case FrameType.STDOUT:
            return [f"| {frame['text']}"]
        case FrameType.STDERR:
            return [f"! {frame['text']}"]
    return continued_lines(_data_lines(frame, verbose))


def _data_lines(frame: Mapping[str, Any], verbose: bool = False) -> list[str]:
    from ..core.frames import FrameType

    match frame.get("type"):
        case FrameType.HOOK:
            return _hook_lines(frame, verbose)
        case FrameType.START:
            run = printable(str(frame["runId"]))
            said = f"  (sandbox {frame['sandbox']})"
            return [f"run {run}: {bounded(_argv(frame['argv']), 1, after=said, what=ARGV)}"]
        case FrameType.LOG:
            return [f"log {frame['level']}: {bounded(frame['message'])}"]
        case FrameType.EMIT:
            return [f"emit {_short(frame['value'])}"]
        case FrameType.ARTIFACT:
            return [f"artifact {frame['name']} ({frame['mime']}, {frame['size']} bytes)"]
        case FrameType.RESULT:
            lines = [f"RESULT {_short(frame['value'], 200)}", *_advised(frame)]
            lines.extend(
                f"  proposed by {printable(str(p.get('hook')))}: {_proposal(p)}"
                for p in frame.get("proposals", ())
            )
            return lines
        case FrameType.ERROR:
            lines = [f"ERROR {bounded(frame['message'], chars=MESSAGE_CHARS)}"]
            if frame.get("refusedBy"):
                lines.append(f"  refused by {frame['refusedBy']}")
            lines.extend(_advised(frame))
            return lines
        case FrameType.END:
            code = frame["exitCode"]
            exited = "no exit code" if code is None else f"exit code {code}"
            return [f"end: {exited}, {lasted(frame)}"]
        case FrameType.WARNING:
            return [f"warning: {bounded(frame['message'], chars=MESSAGE_CHARS)}"]
        case FrameType.CALL:
            note = frame.get("note")
            return [_call_line(frame)] + ([f"  note: {bounded(note)}"] if note else [])
        case FrameType.EGRESS:
            who = f"hook {frame['hook']}" if frame.get("hook") else "the run's script"
            who = f"server {frame['server']}" if frame.get("server") else who
            # (`why`: the host outside the list and the item that would admit it, or a
            # secret's placeholder sent elsewhere; not in frames stored before it was)
            why = frame.get("why") or "blocked by the proxy"
            verdict = "allowed" if frame.get("allowed") else why
            return [f"egress {frame['host']}:{frame['port']} for {who}: {verdict}"]
        case FrameType.ASK:
            waits = (
                f" (default {frame['default']} in {frame['deadlineMs'] / 1000:g} s;"
                " waiting for an answer)"
            )
            return [f"ask from {frame['hook']}: {bounded(frame['question'], after=waits)}"]
    return [other_frame_line(frame)]


def _call_line(frame: Mapping[str, Any]) -> str:
    """A tool call on one line: `ok`, `FAILED` with why, `CANCELLED by the client` (an MCP
    client's call it gave up before its answer: not a failure), or `REFUSED by` the hook
    that refused it (the call was not sent), named from the frame's `refusedBy` whatever its
    error says, and then its reason (the error, without the same name again); `destructive`
    where the server's listing said so (a call refused before its server listed its tools
    cannot know, and says nothing of it, as a tool listed without annotations)."""
    from ..core.servers import CALL_CANCELLED, CALL_SESSION_ENDED

    took = f" in {frame['durationMs']} ms"
    error = str(frame.get("error") or "")
    by = frame.get("refusedBy")
    if frame["ok"]:
        outcome = f"ok{took}"
    elif error == CALL_CANCELLED:
        outcome = f"CANCELLED by the client before its answer,{took}"
    elif error == CALL_SESSION_ENDED:
        outcome = f"CANCELLED: the session ended before its answer,{took}"
    elif by:
        why = error.removeprefix(f"refused by {by}").removeprefix(": ")
        outcome = f"REFUSED by {bounded(f'{by}: {why}' if why else str(by), after=took)}"
    else:
        outcome = f"FAILED: {bounded(error, after=took)}"
    hint = ", destructive" if frame.get("destructiveHint") else ""
    return f"call {frame['server']}.{frame['tool']}{hint}: {outcome}"


def lasted(end: Mapping[str, Any]) -> str:
    """An `end` frame's duration for a person: null when the run's supervisor stopped before
    its end (how long it ran is not known)."""
    took = end.get("durationMs")
    return "duration unknown" if took is None else f"{took} ms"


def other_frame_line(frame: Mapping[str, Any]) -> str:
    """A frame of a type this view does not know: its type, then its fields (envelope and
    type left out) as JSON, shortened."""
    from ..core.frames import ENVELOPE_KEYS

    fields = {k: v for k, v in frame.items() if k not in ENVELOPE_KEYS and k != "type"}
    return f"{frame.get('type', '(no type)')} {_short(fields, 200)}"


def cell(value: Any) -> str:
    """A value of a server's JSON as a table shows it: text as it is, nothing as `-`,
    anything else as short JSON."""
    if isinstance(value, str):
        return printable(value)
    return "-" if value is None else _short(value, 40)


def _short(value: Any, limit: int = 80) -> str:
    text = printable(json.dumps(value, ensure_ascii=False))  # (JSON leaves DEL and C1 as is)
    return text if len(text) <= limit else text[: limit - 3] + "..."
