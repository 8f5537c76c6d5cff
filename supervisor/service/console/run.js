// One run: its frames in the order the server numbered them (the contract's order), hook
// frames in full, an open question with buttons that answer it, and the script's output in
// a virtualised list. Live while the run runs; after a lost socket it resumes from the next
// frame, and says so plainly when the server no longer has the run.

import { announce, commandLine, duration, el, lineDiff, shown, when } from "./dom.js";
import { Socket } from "./net.js";
import { OutputList } from "./output.js";
import { Control, ENVELOPE_KEYS, FrameType, OUTPUT_TYPES, ServiceMessage } from "./tables.js";

/** Frames that are the script's output: drawn in the output list, one group in the timeline. */
const OUTPUT = new Set(OUTPUT_TYPES);

export class RunView {
  constructor(runId, { onGone }) {
    this.runId = runId;
    this.onGone = onGone;
    this.frames = 0; // the next seq expected
    this.ended = false;
    this.asks = new Map(); // askId → {frame, row}
    this.group = null; // the timeline row of the output frames being received
    this.pending = [];
    this.drawing = false;
    this.output = new OutputList("Script output");
    this.timeline = el("ol", { class: "timeline", "aria-label": "Frames" });
    this.head = el("div", { class: "run-head" });
    this.notice = el("p", { class: "notice", role: "status", hidden: true });
    this.root = el(
      "article",
      { class: "run", "aria-labelledby": "run-title" },
      el("h2", { id: "run-title" }, "Run ", el("code", {}, runId)),
      this.head,
      this.notice,
      el("h3", {}, "Timeline"),
      this.timeline,
      el("h3", { id: "output-title" }, "Output ", el("span", { class: "count", id: "output-count" })),
      this.output.root,
    );
    this.socket = new Socket({
      path: () => `/v1/runs/${encodeURIComponent(runId)}?from=${this.frames}`,
      onObject: (obj) => this.take(obj),
      onState: (state) => this.state(state),
      // Closed by the server on purpose: the run is complete (1000) or it refused (4xxx).
      done: (code) => code === 1000 || (code >= 4000 && code < 5000),
    });
  }

  close() {
    this.socket.close();
    for (const ask of this.asks.values()) clearInterval(ask.timer);
  }

  state(state) {
    if (state === "lost" && !this.ended) this.say("The connection was lost; reconnecting…");
    if (state === "open" && !this.ended) this.say(null);
  }

  say(text) {
    this.notice.hidden = !text;
    this.notice.textContent = text || "";
  }

  take(obj) {
    if (!("seq" in obj)) {
      if (obj.type === ServiceMessage.ERROR && obj.askId) {
        const ask = this.asks.get(obj.askId);
        if (ask) ask.state.textContent = obj.message;
      } else if (obj.type === ServiceMessage.ERROR) {
        this.ended = true;
        const gone = obj.code === 4404;
        this.say(gone ? `This run is gone: ${obj.message}. ${this.frames ? "The server restarted or let it go." : ""}` : obj.message);
        if (gone && this.onGone) this.onGone(this.runId);
      }
      return;
    }
    if (obj.seq !== this.frames) return; // replayed already (never expected: from= resumes)
    this.frames += 1;
    this.pending.push(obj);
    if (!this.drawing) {
      this.drawing = true;
      requestAnimationFrame(() => this.drawPending());
    }
  }

  drawPending() {
    this.drawing = false;
    const frames = this.pending;
    this.pending = [];
    for (const frame of frames) this.draw(frame);
    this.label();
    const count = document.getElementById("output-count");
    if (count) count.textContent = this.output.length ? `(${this.output.length.toLocaleString()} lines)` : "";
  }

  draw(frame) {
    if (OUTPUT.has(frame.type)) {
      this.output.push(frame.seq, frame.type, outputText(frame));
      this.outputRow(frame);
      return;
    }
    this.label();
    this.group = null;
    const row = this.row(frame);
    this.timeline.append(row);
    if (frame.type === FrameType.START) this.header(frame, null);
    if (frame.type === FrameType.HOOK) {
      this.settleAsk(frame);
      announce(`hook ${frame.name}: ${frame.status}${frame.refused ? ", refused" : ""}`);
    }
    if (frame.type === FrameType.ASK) announce(`${frame.hook} asks: ${frame.question}`);
    if (frame.type === FrameType.RESULT || frame.type === FrameType.ERROR) this.outcome = frame;
    if (frame.type === FrameType.END) {
      this.ended = true;
      this.header(this.start, frame);
      this.closeAsks();
      announce(`run ended: ${this.outcome ? this.outcome.type : FrameType.END}`);
    }
  }

  header(start, end) {
    if (start) this.start = start;
    const s = this.start || {};
    const outcome = this.outcome;
    const status = end ? (outcome ? outcome.type : FrameType.ERROR) : "running";
    this.head.replaceChildren(
      el("p", { class: "argv" }, el("code", {}, commandLine(s.argv))),
      el(
        "dl",
        { class: "facts" },
        ...[
          ["status", el("span", { class: `badge ${status}` }, status)],
          ["started", when(s.at)],
          ["duration", end ? duration(end.durationMs) : "—"],
          ["exit code", end && end.exitCode !== null && end.exitCode !== undefined ? String(end.exitCode) : "—"],
          ["cwd", el("code", {}, s.cwd || "")],
          ["sandbox", s.sandbox || ""],
          ...(end && outcome && outcome.type === FrameType.ERROR ? [["error", outcome.message]] : []),
        ].map(([term, value]) => el("div", {}, el("dt", {}, term), el("dd", {}, value))),
      ),
    );
  }

  outputRow(frame) {
    if (!this.group) {
      const label = el("span", {}, "");
      const row = el("li", { class: "frame output-group" }, el("span", { class: "seq" }, `#${frame.seq}`), el("span", { class: "type" }, "output"), label);
      this.timeline.append(row);
      this.group = { row, label, first: frame.seq, counts: {} };
    }
    const g = this.group;
    g.counts[frame.type] = (g.counts[frame.type] || 0) + 1;
    g.last = frame.seq;
    this.stale = g;
  }

  /** The output group's label, once per drawn batch (not once per frame). */
  label() {
    const g = this.stale;
    if (!g) return;
    this.stale = null;
    const parts = Object.entries(g.counts).map(([k, n]) => `${n.toLocaleString()} ${k}`);
    g.label.textContent = `${parts.join(", ")} (frames ${g.first}–${g.last}, in the output below)`;
  }

  row(frame) {
    const body = frameBody(frame, this);
    return el(
      "li",
      { class: `frame ${frame.type}${frame.status && frame.status !== "ok" ? " bad" : ""}`, "data-seq": frame.seq, "data-type": frame.type },
      el("span", { class: "seq" }, `#${frame.seq}`),
      el("span", { class: "type" }, frame.type),
      body,
    );
  }

  /** The buttons of an open question. */
  askButtons(frame) {
    const state = el("span", { class: "ask-state", role: "status" }, "");
    const answer = (word) => {
      if (this.socket.send({ type: Control.ANSWER, askId: frame.askId, answer: word })) {
        for (const b of buttons) b.disabled = true;
        state.textContent = `answered ${word}; waiting for the hook…`;
      } else {
        state.textContent = "not connected: the answer was not sent";
      }
    };
    const buttons = [
      el("button", { type: "button", class: "yes", onclick: () => answer("yes") }, "Yes"),
      el("button", { type: "button", class: "no", onclick: () => answer("no") }, "No"),
    ];
    // How long the run still waits, by this machine's clock against the frame's stamp.
    const left = el("span", { class: "ask-left", "aria-live": "off" }, "");
    const deadline = Date.parse(frame.at) + frame.deadlineMs;
    const tick = () => {
      const seconds = Math.max(0, Math.round((deadline - Date.now()) / 1000));
      left.textContent = Number.isNaN(seconds) ? "" : `"${frame.default}" in about ${seconds} s`;
    };
    tick();
    const timer = setInterval(tick, 1000);
    this.asks.set(frame.askId, { frame, buttons, state, left, timer });
    return el("div", { class: "ask-buttons", role: "group", "aria-label": `Answer: ${frame.question}` }, ...buttons, state, left);
  }

  settleAsk(hook) {
    for (const [id, ask] of this.asks) {
      if (ask.frame.hook !== hook.name) continue;
      for (const b of ask.buttons) b.remove();
      clearInterval(ask.timer);
      ask.left.remove();
      const asked = hook.asked || {};
      ask.state.textContent = asked.answer ? `answered ${asked.answer} (by ${asked.by})` : "settled";
      this.asks.delete(id);
    }
  }

  closeAsks() {
    for (const ask of this.asks.values()) {
      clearInterval(ask.timer);
      ask.left.remove();
      for (const b of ask.buttons) b.disabled = true;
      ask.state.textContent = "the run has ended";
    }
    this.asks.clear();
  }
}

function outputText(frame) {
  if (frame.type === FrameType.LOG) return `[${frame.level}] ${frame.message}${frame.attrs && Object.keys(frame.attrs).length ? ` ${JSON.stringify(frame.attrs)}` : ""}`;
  if (frame.type === FrameType.EMIT) return JSON.stringify(frame.value);
  return frame.text ?? "";
}

function pre(text, cls = "") {
  return el("pre", { class: cls }, text);
}

/** What one frame shows, by type; a type this page does not know shows its fields. */
function frameBody(frame, view) {
  switch (frame.type) {
    case FrameType.START:
      return el("div", {}, el("code", {}, commandLine(frame.argv)));
    case FrameType.HOOK:
      return hookBody(frame);
    case FrameType.ASK:
      return el(
        "div",
        { class: "ask" },
        el("p", {}, el("strong", {}, frame.hook), " asks: ", el("span", { class: "question" }, frame.question)),
        el("p", { class: "hint" }, `Unanswered within ${duration(frame.deadlineMs)}, the answer is "${frame.default}"${frame.default === "no" ? " (the run is refused)" : ""}.`),
        view.ended ? null : view.askButtons(frame),
      );
    case FrameType.ARTIFACT:
      return el(
        "div",
        {},
        el("a", { href: `/v1/runs/${encodeURIComponent(frame.runId)}/artifacts/${encodeURIComponent(frame.id)}`, download: frame.name }, frame.name),
        ` ${frame.mime}, ${frame.size.toLocaleString()} bytes`,
      );
    case FrameType.RESULT:
      return el(
        "div",
        {},
        pre(shown(frame.value), "value"),
        list("advice", frame.advice),
        frame.proposals && frame.proposals.length ? el("details", {}, el("summary", {}, `${frame.proposals.length} proposal(s)`), pre(shown(frame.proposals))) : null,
      );
    case FrameType.ERROR:
      return el(
        "div",
        {},
        el("p", { class: "message" }, frame.message),
        fields(frame, ["exitCode", "cause", "refusedBy"]),
        list("advice", frame.advice),
      );
    case FrameType.END:
      return el("div", {}, `exit code ${frame.exitCode ?? "none"}, ${duration(frame.durationMs)}`);
    case FrameType.WARNING:
      return el("p", { class: "message" }, frame.message);
    default: {
      const rest = Object.fromEntries(Object.entries(frame).filter(([k]) => k !== "type" && !ENVELOPE_KEYS.includes(k)));
      return pre(shown(rest));
    }
  }
}

function list(label, items) {
  if (!items || !items.length) return null;
  return el("div", { class: label }, el("span", { class: "label" }, `${label}: `), el("ul", {}, ...items.map((a) => el("li", {}, String(a)))));
}

/** How a frame's field is said on the page. */
const SAID = { exitCode: "exit code", refusedBy: "refused by", signal: "signal", cause: "cause" };

function fields(frame, names) {
  const parts = names.filter((n) => frame[n] !== undefined && frame[n] !== null).map((n) => `${SAID[n] || n} ${frame[n]}`);
  return parts.length ? el("p", { class: "fields" }, parts.join(" · ")) : null;
}

function hookBody(h) {
  const clamp = h.requestedEffect && h.requestedEffect !== h.effect;
  const line = el(
    "p",
    { class: "hook-line" },
    el("strong", { class: "name" }, h.name),
    " ",
    el("span", { class: "phase" }, `${h.on}.${h.phase}`),
    " ",
    el("span", { class: `badge ${h.status}` }, h.status),
    h.refused ? el("span", { class: "badge refused" }, h.refused.failClosed ? "refused (fail-closed)" : "refused") : null,
    h.changed ? el("span", { class: "badge changed" }, "applied") : null,
    " effect ",
    el("span", { class: "effect" }, h.effect),
    clamp ? el("span", { class: "clamp" }, ` (asked ${h.requestedEffect}, clamped by ${(h.clampedBy || []).join(", ")})`) : null,
    ` · ${h.action} · ${duration(h.durationMs)} · sandbox ${h.sandbox}`,
  );
  const parts = [line];
  if (h.refused) parts.push(el("p", { class: "refusal" }, `Refused: ${h.refused.reason}`));
  if (h.reason) parts.push(el("p", { class: "reason" }, h.reason));
  if (h.failureNote) parts.push(el("p", { class: "note" }, h.failureNote));
  if (h.asked) {
    parts.push(el("p", { class: "asked" }, `Asked “${h.asked.question}”: ${h.asked.answer ?? "no answer"}${h.asked.by ? ` (by ${h.asked.by})` : ""}`));
  }
  parts.push(list("advice", h.advice));
  if (h.dropped && h.dropped.length) {
    parts.push(el("div", { class: "dropped" }, el("span", { class: "label" }, "dropped: "), el("ul", {}, ...h.dropped.map((d) => el("li", {}, el("code", {}, d.key), ` — ${d.reason}`)))));
  }
  if (h.changed) parts.push(diffBlock(h.original, h.value));
  if (h.proposals && h.proposals.length) {
    parts.push(el("details", {}, el("summary", {}, `${h.proposals.length} proposal(s), not applied`), pre(shown(h.proposals))));
  }
  const exit = fields(h, ["exitCode", "signal", "model", "tokens", "cached", "server", "tool"]);
  if (exit) parts.push(exit);
  if (h.ran) parts.push(el("details", {}, el("summary", {}, `ran ${commandLine(h.ran.argv)}: ${h.ran.status}`), pre(shown(h.ran))));
  // What a failed hook said stands open under its failure ("jq is missing: …").
  const failed = h.status !== "ok" && h.status !== "skipped";
  if (h.stdoutHead) parts.push(el("details", { open: failed }, el("summary", {}, "stdout (its head)"), pre(h.stdoutHead)));
  if (h.stdoutTail && h.stdoutTail !== h.stdoutHead) {
    parts.push(el("details", { class: "said", open: failed }, el("summary", {}, "stdout (its tail)"), pre(h.stdoutTail)));
  }
  if (h.stderrTail) parts.push(el("details", { class: "said", open: failed }, el("summary", {}, "stderr (its tail)"), pre(h.stderrTail)));
  return el("div", { class: "hook" }, ...parts);
}

/** `original → new` for an applied hook: both values, and their lines that differ. */
function diffBlock(original, value) {
  const before = shown(original);
  const after = shown(value);
  const rows = lineDiff(before, after).map(([mark, text]) =>
    el("div", { class: mark === "+" ? "add" : mark === "-" ? "del" : "same" }, el("span", { class: "mark", "aria-label": mark === "+" ? "added" : mark === "-" ? "removed" : "" }, mark), text),
  );
  return el(
    "figure",
    { class: "diff" },
    el("figcaption", {}, "original → new"),
    el("div", { class: "diff-sides" }, el("div", {}, el("span", { class: "label" }, "original"), pre(before, "before")), el("div", { class: "arrow", "aria-hidden": "true" }, "→"), el("div", {}, el("span", { class: "label" }, "new"), pre(after, "after"))),
    el("div", { class: "diff-lines", "aria-label": "lines changed" }, ...rows),
  );
}
