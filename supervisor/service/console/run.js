// One run: its frames in the order the server numbered them (the contract's order), hook
// frames in full, an open question with buttons that answer it, and the script's output in
// a virtualised list. Live while the run runs; after a lost socket it resumes from the next
// frame, and says so plainly when the server no longer has the run.

import { announce, commandLine, duration, el, visible, when } from "./dom.js";
import { Folds } from "./folds.js";
import { frameBody, frameSaid, outputText } from "./frames.js";
import { Socket } from "./net.js";
import { OutputList } from "./output.js";
import { QuestionLink } from "./questions.js";
import { RunningList } from "./running.js";
import { AnsweredBy, Close, Control, FrameType, HookStatus, OUTPUT_TYPES, ServiceMessage } from "./tables.js";

/** What a person does to move the page: it ends keeping an opened line in view. */
const ANCHOR_BREAKERS = ["wheel", "keydown", "mousedown", "touchstart"];

/** Frames that are the script's output: drawn in the output list, one group in the timeline. */
const OUTPUT = new Set(OUTPUT_TYPES);

/** Settled questions kept for a refusal of this page's answer that comes after the frame
 * that settled them (the server sent that frame before it read the answer). */
const SETTLED_KEPT = 64;

/** Moves the focus out of `from` (a question's buttons, about to go) to `to`, if it is in. */
function keepFocus(from, to) {
  if (from.contains(document.activeElement)) to.focus();
}

/** What a settled question says: the answer that counts and who gave it, and whether the
 * answer this page sent (`sent`, or null) was not the one taken; with no answer, why (the
 * hook frame's `reason`: the run was cancelled while it waited). */
function settledText(asked, sent, reason) {
  if (!asked || !asked.answer) return reason ? `not answered: ${reason}` : "not answered";
  const late = asked.by === AnsweredBy.DEADLINE;
  const said = late ? `nobody answered in time: "${asked.answer}" applied at its deadline` : `answered ${asked.answer} (by ${asked.by})`;
  if (sent === null || (!late && sent === asked.answer && asked.by === AnsweredBy.CLIENT)) return said;
  return `${said}; the "${sent}" sent from this page was not taken${late ? ": it came after the deadline" : ": the first answer counts"}`;
}

/** What a question says whose run ended with no word on it (no hook frame settled it): the
 * server that ran it stopped first (killed: the next one ended the run where its history
 * ends), and the run's end as that history has it (`outcome`: its result or error frame). */
function unanswered(outcome) {
  const ended = !outcome ? "the run ended with no outcome" : outcome.type === FrameType.ERROR ? `the run ended in error: ${outcome.message}` : `the run ended: ${outcome.type}`;
  return `not answered: the server stopped before the question was answered; ${ended}`;
}

/** The address of a run, or of one of its frames: `#/runs/ID` and `#/runs/ID@seq`. */
export function runLink(runId, seq = null) {
  return `#/runs/${encodeURIComponent(runId)}${seq === null ? "" : `@${seq}`}`;
}

export class RunView {
  /** `target`: the seq of the frame to open the run at (scrolled to, marked), or null.
   * `running`: the hooks running now (`running.js`), shown live under the timeline. */
  constructor(runId, { onGone, onDiverged = null, note = null, target = null, running = null }) {
    this.runId = runId;
    this.onGone = onGone;
    // The server kept less of the run than this page drew (it was killed before it wrote the
    // rest to its history): `onDiverged(shown)` opens the run again, as kept, saying `note`.
    this.onDiverged = onDiverged;
    this.note = note;
    this.last = null; // the last frame taken: resuming asks for it again, to check it is the same
    this.checking = false;
    this.target = target;
    this.running = running;
    this.frames = 0; // the next seq expected
    this.ended = false;
    // The output line opened at, kept in view while the frames after it are drawn above the
    // output box, until the run's end or a person moves the page (`keepAnchor`).
    this.anchored = null;
    this.unanchor = () => (this.anchored = null);
    for (const kind of ANCHOR_BREAKERS) document.addEventListener(kind, this.unanchor, { passive: true });
    this.asks = new Map(); // askId → {frame, group, buttons, state, left, timer, sent, asked}
    this.settled = new Map(); // askId → the same, once its hook frame came (`SETTLED_KEPT`)
    this.group = null; // the timeline row of the output frames being received
    // Stretches of frames past their first few counted in one row (`folds.js`).
    this.folds = new Folds(
      (seq) => runLink(runId, seq),
      () => {
        this.label();
        this.group = null;
      },
    );
    this.pending = [];
    this.drawing = false;
    this.output = new OutputList("Script output", (seq) => runLink(runId, seq));
    this.timeline = el("ol", { class: "timeline", "aria-label": "Frames" });
    this.hooksNow = new RunningList();
    this.head = el("div", { class: "run-head" });
    this.notice = el("p", { class: "notice", role: "status", hidden: true });
    const title = el("h2", { id: "run-title" }, "Run ", el("code", {}, runId));
    this.toQuestion = new QuestionLink(title);
    this.root = el(
      "article",
      { class: "run", "aria-labelledby": "run-title" },
      title,
      this.toQuestion.root,
      this.head,
      this.notice,
      this.tools(),
      el("h3", {}, "Timeline"),
      this.timeline,
      this.hooksNow.root,
      el("h3", { id: "output-title" }, "Output ", el("span", { class: "count", id: "output-count" })),
      this.output.root,
    );
    this.socket = new Socket({
      // From the last frame drawn, not the next: a server that kept a different one (killed,
      // then started again on its history) is told from the same one.
      path: () => {
        this.checking = this.frames > 0;
        return `/v1/runs/${encodeURIComponent(runId)}?from=${Math.max(this.frames - 1, 0)}`;
      },
      onObject: (obj) => this.take(obj),
      onState: (state) => this.state(state),
      // Closed by the server on purpose: the run is complete (1000) or it refused (4xxx).
      done: (code) => code === 1000 || (code >= 4000 && code < 5000),
    });
    if (running) {
      this.stopListening = running.listen((id) => id === runId && this.showRunning());
      this.showRunning();
    }
  }

  /** The run's downloads (every line it kept, not what is drawn) and the time stamps' switch. */
  tools() {
    const base = `/v1/runs/${encodeURIComponent(this.runId)}`;
    const times = el("input", { type: "checkbox", id: "show-times" });
    times.addEventListener("change", () => {
      this.root.classList.toggle("show-times", times.checked);
      this.output.showTimes(times.checked);
    });
    return el(
      "div",
      { class: "run-tools" },
      el("a", { href: `${base}/output.txt`, download: `run-${this.runId}-output.txt`, class: "download" }, "Download output (.txt)"),
      el("a", { href: `${base}/frames.ndjson`, download: `run-${this.runId}-frames.ndjson`, class: "download" }, "Download frames (.ndjson)"),
      el("label", { class: "times" }, times, " Show times"),
    );
  }

  showRunning() {
    const asking = new Map([...this.asks.values()].map(({ frame }) => [frame.hook, frame.at]));
    this.hooksNow.draw(this.ended ? [] : this.running.of(this.runId), asking);
  }

  /** Opens the run at frame `seq`: scrolled to it and marked, once it is drawn. */
  goTo(seq) {
    this.target = seq;
    if (seq !== null && seq < this.frames && !this.pending.length) this.reveal();
  }

  reveal() {
    const seq = this.target;
    if (seq === null || seq >= this.frames - this.pending.length) return;
    this.target = null;
    for (const old of this.timeline.querySelectorAll(".marked")) old.classList.remove("marked");
    const row = this.timeline.querySelector(`li[data-seq="${seq}"]`);
    const mark = (r) => {
      r.classList.add("marked");
      r.scrollIntoView({ block: "center" });
    };
    if (row) return mark(row);
    if (this.output.reveal(seq)) {
      this.anchored = seq;
      return this.keepAnchor();
    }
    const folded = [...this.timeline.querySelectorAll("li.folded")].find((r) => seq >= Number(r.dataset.first) && seq <= Number(r.dataset.last));
    if (folded) mark(folded);
  }

  /** The marked output line in view (not the box's middle: a box taller than the window
   * would centre a part the line is not in), again after each batch of frames drawn above
   * it, until the run has ended. */
  keepAnchor() {
    const line = this.output.root.querySelector(".line.marked");
    (line ?? this.output.root).scrollIntoView({ block: "center" });
    if (this.ended) this.anchored = null;
  }

  close() {
    for (const kind of ANCHOR_BREAKERS) document.removeEventListener(kind, this.unanchor);
    this.socket.close();
    this.hooksNow.stop();
    if (this.stopListening) this.stopListening();
    for (const ask of this.asks.values()) clearInterval(ask.timer);
  }

  state(state) {
    if (state === "lost" && !this.ended) this.say("The connection was lost; reconnecting…");
    if (state === "open" && !this.ended) this.say(null);
  }

  /** The server said it is shutting down (SIGTERM): it lets the runs under way finish for a
   * while (its grace), streaming them and taking their answers, then cancels those left. */
  stopping() {
    if (this.ended || !this.socket.isOpen) return;
    this.shutdownSaid = true;
    this.say("The server is shutting down: this run may still finish (its frames still come here, and its question can still be answered) until the server's grace ends; then it is cancelled.");
  }

  say(text) {
    const said = text || this.note;
    this.notice.hidden = !said;
    this.notice.textContent = visible(said || "");
  }

  /** The run as the server keeps it is not what this page drew: it is drawn again from its
   * first frame (nothing twice, nothing the server does not have). */
  diverged() {
    this.socket.close();
    this.ended = true;
    if (this.onDiverged) this.onDiverged(this.frames);
    else this.say(`The server kept less of this run than this page showed (${this.frames} frames): reload the page to see it as kept.`);
  }

  /** Whether `obj`, the first frame on a resumed socket, is the last frame this page drew. */
  same(obj) {
    return this.last !== null && obj.seq === this.last.seq && obj.type === this.last.type && obj.at === this.last.at;
  }

  take(obj) {
    if (this.checking) {
      this.checking = false;
      if ("seq" in obj && this.same(obj)) return; // the same server, or one that kept it all
      if ("seq" in obj || obj.code === Close.OUT_OF_RANGE) return this.diverged();
    }
    if (!("seq" in obj)) {
      if (obj.type === ServiceMessage.ERROR && obj.askId) {
        // Said after the frames that came before it (drawn at the next animation frame).
        if (this.pending.length) this.pending.push(obj);
        else this.refused(obj);
      } else if (obj.type === ServiceMessage.ERROR) {
        this.ended = true;
        const gone = obj.code === Close.NOT_FOUND;
        this.say(gone ? `This run is gone: ${obj.message}. ${this.frames ? "The server restarted or let it go." : ""}` : obj.message);
        if (gone && this.onGone) this.onGone(this.runId);
      }
      return;
    }
    if (obj.seq !== this.frames) return; // replayed already (never expected: from= resumes)
    this.frames += 1;
    this.last = { seq: obj.seq, type: obj.type, at: obj.at };
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
    for (const frame of frames) {
      if ("seq" in frame) this.draw(frame);
      else this.refused(frame);
    }
    this.label();
    const count = document.getElementById("output-count");
    const n = this.output.length;
    if (count) count.textContent = n ? `(${n.toLocaleString()} line${n === 1 ? "" : "s"})` : this.ended ? "(none: the script printed nothing)" : "";
    if (this.target !== null) this.reveal();
    else if (this.anchored !== null) this.keepAnchor();
    this.toQuestion.drawn();
  }

  draw(frame) {
    if (OUTPUT.has(frame.type)) {
      this.output.push(frame.seq, frame.type, outputText(frame), frame.at);
      if (!this.folds.take(frame, this.timeline)) this.outputRow(frame);
      return;
    }
    if (this.folds.take(frame, this.timeline)) return;
    this.label();
    this.group = null;
    const row = this.row(frame);
    this.timeline.append(row);
    if (frame.type === FrameType.START) this.header(frame, null);
    if (frame.type === FrameType.HOOK) {
      this.settleAsk(frame);
      announce(`hook ${frame.name}: ${frame.status}${frame.refused ? ", refused" : ""}`);
    }
    if (frame.type === FrameType.ASK) {
      announce(`${frame.hook} asks: ${frame.question}`, true);
      if (this.asks.has(frame.askId)) this.toQuestion.asked(frame.askId, row.querySelector(".question-line"), runLink(this.runId, frame.seq));
    }
    if ((frame.type === FrameType.ASK || frame.type === FrameType.HOOK) && this.running) this.showRunning();
    if (frame.type === FrameType.RESULT || frame.type === FrameType.ERROR) this.outcome = frame;
    if (frame.type === FrameType.END) {
      this.ended = true;
      if (this.shutdownSaid) this.say(null); // (what the server's shutdown meant for it is over)
      this.header(this.start, frame);
      this.closeAsks();
      if (this.running) this.showRunning();
      announce(`run ended: ${this.outcome ? this.outcome.type : FrameType.END}`);
    }
  }

  header(start, end) {
    if (start) this.start = start;
    const s = this.start || {};
    const outcome = this.outcome;
    const status = end ? (outcome ? outcome.type : FrameType.ERROR) : "running";
    this.head.replaceChildren(
      el("p", { class: "argv" }, el("code", { class: "cmdline" }, commandLine(s.argv))),
      el(
        "dl",
        { class: "facts" },
        ...[
          ["status", el("span", { class: `badge ${status}` }, status)],
          ["started", when(s.at)],
          ["duration", end ? (end.durationMs == null ? "unknown" : duration(end.durationMs)) : "—"],
          ["exit code", end && end.exitCode !== null && end.exitCode !== undefined ? String(end.exitCode) : "—"],
          ["cwd", el("code", {}, s.cwd || "")],
          ["sandbox", s.sandbox || ""],
          ...(end && outcome && outcome.type === FrameType.ERROR ? [["error", el("span", { class: "message" }, outcome.message)]] : []),
        ].map(([term, value]) => el("div", {}, el("dt", {}, term), el("dd", {}, value))),
      ),
    );
  }

  outputRow(frame) {
    if (!this.group) {
      const label = el("div", { class: "label" }, "");
      const row = el("li", { class: "frame output-group" }, el("a", { class: "seq", href: runLink(this.runId, frame.seq), "aria-label": `frame ${frame.seq}: the script's output, from here` }, `#${frame.seq}`), el("span", { class: "type" }, "output"), label);
      this.timeline.append(row);
      this.group = { row, label, first: frame.seq, counts: {} };
    }
    const g = this.group;
    g.counts[frame.type] = (g.counts[frame.type] || 0) + 1;
    g.last = frame.seq;
    this.stale = g;
  }

  /** The output group's label, once per drawn batch (not once per frame); so are the folded
   * rows'. */
  label() {
    this.folds.label();
    const g = this.stale;
    if (!g) return;
    this.stale = null;
    const parts = Object.entries(g.counts).map(([k, n]) => `${n.toLocaleString()} ${k}`);
    g.label.textContent = `${parts.join(", ")} (${g.first === g.last ? `frame ${g.first}` : `frames ${g.first}–${g.last}`}, in the output below)`;
  }

  row(frame) {
    const body = frameBody(frame, this);
    return el(
      "li",
      { class: `frame ${frame.type}${(frame.status && frame.status !== HookStatus.OK) || frame.ok === false ? " bad" : ""}`, "data-seq": frame.seq, "data-type": frame.type },
      // Named by what the frame is: "frame 7: hook lint (script.onSuccess), failed", not "#7".
      el("a", { class: "seq", href: runLink(this.runId, frame.seq), title: when(frame.at), "aria-label": visible(`frame ${frame.seq}: ${frameSaid(frame)}`) }, `#${frame.seq}`),
      el("span", { class: "type" }, frame.type, el("span", { class: "at" }, when(frame.at))),
      body,
    );
  }

  /** The buttons of an open question. */
  askButtons(frame) {
    // Where the focus goes when the buttons go (answered here, or settled elsewhere).
    const state = el("span", { class: "ask-state", role: "status", tabindex: "-1" }, "");
    const ask = { frame, state, sent: null };
    const answer = (word) => {
      if (this.socket.send({ type: Control.ANSWER, askId: frame.askId, answer: word })) {
        ask.sent = word;
        keepFocus(ask.group, state);
        for (const b of ask.buttons) b.disabled = true;
        state.textContent = `answered ${word}; waiting for the hook…`;
      } else {
        state.textContent = "not connected: the answer was not sent";
      }
    };
    ask.buttons = [
      el("button", { type: "button", class: "yes", onclick: () => answer("yes") }, "Yes"),
      el("button", { type: "button", class: "no", onclick: () => answer("no") }, "No"),
    ];
    // How long the run still waits, by this machine's clock against the frame's stamp.
    ask.left = el("span", { class: "ask-left", "aria-live": "off" }, "");
    ask.group = el("div", { class: "ask-buttons", role: "group", "aria-label": `Answer: ${frame.question}` }, ...ask.buttons, state, ask.left);
    const deadline = Date.parse(frame.at) + frame.deadlineMs;
    const tick = () => {
      const left = deadline - Date.now();
      if (left <= 0) return this.expired(ask);
      ask.left.textContent = Number.isNaN(left) ? "" : `"${frame.default}" in about ${Math.round(left / 1000)} s`;
    };
    ask.timer = setInterval(tick, 1000);
    tick();
    this.asks.set(frame.askId, ask);
    return ask.group;
  }

  /** The question's deadline has passed by this page's clock: no answer from here would
   * count, so none is offered. The server says what applied (its hook frame comes). */
  expired(ask) {
    clearInterval(ask.timer);
    ask.left.textContent = "";
    if (ask.sent !== null) return; // answered from here: its fate is the server's to say
    this.toQuestion.gone(ask.frame.askId);
    keepFocus(ask.group, ask.state);
    for (const b of ask.buttons) b.disabled = true;
    ask.state.textContent = visible(`its deadline has passed by this page's clock: "${ask.frame.default}" applies unless the server took an answer in time`);
  }

  /** The server refused this page's answer (`obj`, an error message with its `askId`). */
  refused(obj) {
    const open = this.asks.get(obj.askId);
    const done = this.settled.get(obj.askId);
    if (open) open.state.textContent = visible(obj.message);
    else if (done) done.state.textContent = visible(`${settledText(done.asked, null, done.reason)}. ${obj.message}`);
  }

  settleAsk(hook) {
    for (const [id, ask] of this.asks) {
      if (ask.frame.hook !== hook.name) continue;
      keepFocus(ask.group, ask.state);
      for (const b of ask.buttons) b.remove();
      clearInterval(ask.timer);
      ask.left.remove();
      ask.asked = hook.asked;
      ask.reason = hook.reason;
      ask.state.textContent = visible(settledText(hook.asked, ask.sent, hook.reason));
      this.asks.delete(id);
      this.toQuestion.gone(id);
      this.settled.set(id, ask);
      if (this.settled.size > SETTLED_KEPT) this.settled.delete(this.settled.keys().next().value);
    }
  }

  closeAsks() {
    for (const ask of this.asks.values()) {
      clearInterval(ask.timer);
      ask.left.remove();
      keepFocus(ask.group, ask.state);
      for (const b of ask.buttons) b.disabled = true;
      ask.state.textContent = visible(unanswered(this.outcome));
      this.toQuestion.gone(ask.frame.askId);
    }
    this.asks.clear();
  }
}
