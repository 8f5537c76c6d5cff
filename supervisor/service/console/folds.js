// Stretches of frames a run may hold without end, folded in the timeline: past the first
// `SHOWN` of a stretch, one row counts the rest, so the page stays as light as the run is
// long. Two kinds: `egress` refusals (a script may try a hundred thousand hosts) and a
// script's tool calls (each `call` frame with the `call` point's hook frames around it: a
// script may make thousands of calls). A call that failed or is marked destructive, and a call
// hook that did not go plainly (failed, refused, asked, applied, proposed, or had keys of its
// answer dropped) is always a row of its own, between two folded rows; the script's output between folded frames is counted in the row (its
// lines are in the output box, as always).

import { el } from "./dom.js";
import { FrameType, HookStatus, OUTPUT_TYPES, Phase } from "./tables.js";

/** How many of a stretch are drawn before the rest is counted: egress frames, or calls. */
export const SHOWN = 20;
const OUTPUT = new Set(OUTPUT_TYPES);
/** The `call` point's name: that of the frame it makes. */
const CALL_POINT = FrameType.CALL;

/** The stretch `frame` belongs to (`egress`, `call`), or null. */
function kindOf(frame) {
  if (frame.type === FrameType.EGRESS) return FrameType.EGRESS;
  if (frame.type === FrameType.CALL || (frame.type === FrameType.HOOK && frame.on === CALL_POINT)) return CALL_POINT;
  return null;
}

/** Whether a frame of a call stretch is one a person looks for: never folded. */
function notable(frame) {
  if (frame.type === FrameType.CALL) return frame.ok === false || Boolean(frame.destructiveHint);
  const failed = frame.status !== HookStatus.OK && frame.status !== HookStatus.SKIPPED;
  const some = (list) => Boolean(list && list.length);
  return failed || Boolean(frame.refused || frame.changed || frame.asked) || some(frame.proposals) || some(frame.dropped);
}

/** Whether a call frame starts a call: its `before` hook, or the call itself. */
function startsCall(frame) {
  return frame.type === FrameType.CALL || frame.phase === Phase.BEFORE;
}

export class Folds {
  /** `link(seq)`: the address of a frame; `open()`: called before a new row is appended,
   * for the timeline to close what it groups. */
  constructor(link, open) {
    this.link = link;
    this.open = open;
    this.stretch = null; // {kind, drawn, row}
    this.stale = new Set();
  }

  /** Whether `frame` is counted in a folded row rather than drawn (`timeline`: where a new
   * folded row goes). Output frames are counted only while a row is counting. */
  take(frame, timeline) {
    if (OUTPUT.has(frame.type)) {
      const row = this.stretch && this.stretch.row;
      if (!row) return false;
      row.outputs += 1;
      this.count(row, frame.seq);
      return true;
    }
    const kind = kindOf(frame);
    if (!kind) {
      this.stretch = null;
      return false;
    }
    if (!this.stretch || this.stretch.kind !== kind) this.stretch = { kind, drawn: 0, row: null };
    const s = this.stretch;
    if (kind === CALL_POINT && notable(frame)) {
      s.row = null;
      if (frame.type === FrameType.CALL) s.drawn += 1;
      return false;
    }
    const calls = kind === CALL_POINT;
    if (!s.row && (s.drawn < SHOWN || (calls && !startsCall(frame)))) {
      if (!calls || frame.type === FrameType.CALL) s.drawn += 1;
      return false;
    }
    if (!s.row) s.row = this.newRow(kind, frame.seq, timeline);
    const row = s.row;
    if (frame.type === FrameType.CALL) {
      const tool = `${frame.server}.${frame.tool}`;
      row.tools.set(tool, (row.tools.get(tool) || 0) + 1);
    }
    row.frames += 1;
    this.count(row, frame.seq);
    return true;
  }

  newRow(kind, seq, timeline) {
    this.open();
    const label = el("div", { class: "label" }, "");
    const node = el("li", { class: `frame folded ${kind}`, "data-first": seq }, el("a", { class: "seq", href: this.link(seq), "aria-label": `frame ${seq}: the first of the frames this row counts` }, `#${seq}`), el("span", { class: "type" }, kind === CALL_POINT ? "calls" : kind), label);
    timeline.append(node);
    return { kind, node, label, first: seq, last: seq, frames: 0, outputs: 0, tools: new Map() };
  }

  count(row, seq) {
    row.last = seq;
    row.node.dataset.last = seq;
    this.stale.add(row);
  }

  /** The labels of the rows that counted frames since the last call: once per drawn batch. */
  label() {
    for (const row of this.stale) row.label.textContent = said(row);
    this.stale.clear();
  }
}

/** What a folded row says. */
function said(row) {
  const n = (count) => count.toLocaleString("en");
  const output = row.outputs ? `; ${n(row.outputs)} output frames, in the output below` : "";
  const where = ` (frames ${row.first}\u2013${row.last}; every one is in Download frames)`;
  if (row.kind !== CALL_POINT) return `${n(row.frames)} more ${row.kind} frames${output}${where}`;
  const calls = [...row.tools.values()].reduce((a, b) => a + b, 0);
  const tools = [...row.tools].map(([tool, count]) => `${tool} \u00d7${n(count)}`).join(", ");
  const hooks = row.frames - calls;
  const parts = [calls ? `${n(calls)} more calls, all ok: ${tools}` : null, hooks ? `${n(hooks)} call hook frames, none failed or refused` : null];
  return `${parts.filter(Boolean).join("; ")}${output}${where}`;
}
