// What one frame of a run shows, by type (a hook frame in full: status, effect and clamp,
// what it dropped, what an \`apply\` changed as original → new), and an output frame's text.

import { overwritten, parse, styleNode } from "./ansi.js";
import { commandLine, cut, duration, el, lineDiff, shown, size } from "./dom.js";
import { ANSWER_WORDS, CALL_CANCELLED, CALL_SESSION_ENDED, ENVELOPE_KEYS, FrameType, HOOK_NOTES, HookStatus, PROCESS_ANSWER } from "./tables.js";

export function outputText(frame) {
  if (frame.type === FrameType.LOG) return `[${frame.level}] ${frame.message}${frame.attrs && Object.keys(frame.attrs).length ? ` ${JSON.stringify(frame.attrs)}` : ""}`;
  if (frame.type === FrameType.EMIT) return JSON.stringify(frame.value);
  return frame.text ?? "";
}

function pre(text, cls = "") {
  return el("pre", { class: cls }, text);
}

/** What a hook's process printed, as a terminal shows it (a linter's colours drawn, every
 * other escape sequence dropped, a progress bar's carriage returns written over), as the
 * run's output is. */
function printed(text) {
  return el("pre", {}, ...coloured(text));
}

/** Text a program printed, as spans in its colours (so is advice: a hook's plain stdout is
 * its advice, a formatter's colours included). */
function coloured(text) {
  const { pieces } = parse(text);
  return (text.includes("\r") ? overwritten(pieces) : pieces).map((piece) => styleNode(el("span", {}, piece.text), piece.style));
}

/** The most characters of a command line, question or message a frame's link says. */
const SAID_TEXT = 60;

/** What a frame is, in a few words, for its link's name: its type and what tells it from
 * the frames around it (`hook lint (script.onSuccess), failed`). */
export function frameSaid(frame) {
  switch (frame.type) {
    case FrameType.START:
      return `start, ${cut(commandLine(frame.argv), SAID_TEXT)}`;
    case FrameType.HOOK:
      return `hook ${frame.name} (${frame.on}.${frame.phase}), ${frame.status}${frame.refused ? ", refused" : ""}${frame.changed ? ", applied" : ""}`;
    case FrameType.CALL:
      return `call ${frame.server}.${frame.tool}, ${callOutcome(frame)}`;
    case FrameType.ASK:
      return `question from ${frame.hook}: ${cut(frame.question, SAID_TEXT)}`;
    case FrameType.ARTIFACT:
      return `artifact ${cut(frame.name, SAID_TEXT)}`;
    case FrameType.EGRESS:
      return `egress to ${frame.host}:${frame.port}, not admitted`;
    case FrameType.ERROR:
    case FrameType.WARNING:
      return `${frame.type}: ${cut(frame.message ?? "", SAID_TEXT)}`;
    case FrameType.END:
      return `end, exit code ${frame.exitCode ?? "none"}`;
    default:
      return String(frame.type);
  }
}

/** What one frame shows, by type; a type this page does not know shows its fields. */
export function frameBody(frame, view) {
  switch (frame.type) {
    case FrameType.START:
      return el("div", {}, el("code", { class: "cmdline" }, commandLine(frame.argv)));
    case FrameType.HOOK:
      return hookBody(frame);
    case FrameType.CALL:
      return callBody(frame);
    case FrameType.ASK:
      return el(
        "div",
        { class: "ask" },
        // Where "Go to the open question" takes the focus (`questions.js`).
        el("p", { class: "question-line", tabindex: "-1" }, el("strong", {}, frame.hook), " asks: ", el("span", { class: "question" }, frame.question)),
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
      return el("div", {}, `exit code ${frame.exitCode ?? "none"}, ${frame.durationMs == null ? "duration unknown" : duration(frame.durationMs)}`);
    case FrameType.WARNING:
      return el("p", { class: "message" }, frame.message);
    default: {
      const rest = Object.fromEntries(Object.entries(frame).filter(([k]) => k !== "type" && !ENVELOPE_KEYS.includes(k)));
      return pre(shown(rest));
    }
  }
}

/** The items of a list drawn at most (a hook's advice may hold a hundred thousand): the rest
 * are counted, as the command line's view counts them; the frames download holds them all. */
const LIST_ITEMS = 20;

function list(label, items) {
  if (!items || !items.length) return null;
  const more = items.length - LIST_ITEMS;
  return el(
    "div",
    { class: label },
    el("span", { class: "label" }, `${label}: `),
    el("ul", {}, ...items.slice(0, LIST_ITEMS).map((a) => el("li", {}, ...coloured(shown(String(a)))))),
    more > 0 ? el("p", { class: "hint more" }, `… and ${more.toLocaleString("en")} more (all of them: Download frames)`) : null,
  );
}

/** A prompt hook's model and what its answer cost, as `exec` says them: `model default
 * (openai qwen2.5-coder:7b): 412 tokens in, 31 out · answered in 806 ms`, or that the answer
 * was the one kept, the model not asked. */
function modelSaid(h) {
  const m = h.model;
  let said = typeof m === "object" ? `model ${m.name} (${[m.provider, m.model].filter(Boolean).join(" ")})` : `model ${m}`;
  const t = h.tokens;
  if (h.cached) said += ": the cached answer, the model not asked";
  else if (t && typeof t === "object") said += `: ${t.prompt} tokens in, ${t.completion} out`;
  if (!h.cached && h.latencyMs != null) said += `${t ? " · " : ": "}answered in ${duration(h.latencyMs)}`;
  return said;
}

/** How a frame's field is said on the page. */
const SAID = { exitCode: "exit code", refusedBy: "refused by", signal: "signal", cause: "cause" };

function fields(frame, names) {
  const parts = names.filter((n) => frame[n] !== undefined && frame[n] !== null).map((n) => `${SAID[n] || n} ${frame[n]}`);
  return parts.length ? el("p", { class: "fields" }, parts.join(" · ")) : null;
}

/** How a call ended, as its badge says it (and `exec` its line): `ok`; `refused` (a hook
 * refused it: it was never sent); `cancelled` (its MCP client gave it up before its answer,
 * or its session ended first: not a failure of the tool's); else `failed`. */
function callOutcome(c) {
  if (c.ok) return HookStatus.OK;
  if (c.refusedBy) return "refused";
  return c.error === CALL_CANCELLED || c.error === CALL_SESSION_ENDED ? "cancelled" : HookStatus.FAILED;
}

/** One of a script's tool calls, in one line as `exec` prints it (`words.count ok · 12 ms`),
 * and why it failed, or which hook refused it and why. Its arguments and answer are never in
 * a frame: their hash is. */
function callBody(c) {
  const outcome = callOutcome(c);
  // A refusal's error begins with "refused by HOOK": said once, with the hook's name.
  const said = c.refusedBy ? `Refused by ${c.refusedBy}: ${String(c.error || "").replace(`refused by ${c.refusedBy}`, "").replace(/^: /, "") || "no reason given"}` : c.error;
  return el(
    "div",
    { class: "call-body" },
    el(
      "p",
      { class: "call-line" },
      el("strong", { class: "name" }, `${c.server}.${c.tool}`),
      " ",
      el("span", { class: `badge ${outcome}` }, outcome),
      c.destructiveHint ? el("span", { class: "badge destructive" }, "destructive") : null,
      ` · ${duration(c.durationMs)} · call ${c.id}`,
      el("span", { class: "hash", title: `SHA-256 of the arguments: ${c.argsSha256}` }, ` · args ${String(c.argsSha256 || "").slice(0, 12)}…`),
    ),
    said ? el("p", { class: c.refusedBy ? "refusal" : "message" }, said) : null,
    c.note ? el("p", { class: "message" }, `note: ${c.note}`) : null,
  );
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
    // A plugin hook names whose tool answered it.
    ` · ${h.server && h.tool ? `${h.action} ${h.server}.${h.tool}` : h.action} · ${duration(h.durationMs)} · sandbox ${h.sandbox}`,
  );
  const parts = [line];
  if (h.refused) parts.push(el("p", { class: "refusal" }, `Refused: ${h.refused.reason}`));
  if (h.reason) parts.push(el("p", { class: "reason" }, h.reason));
  for (const key of HOOK_NOTES) if (h[key]) parts.push(el("p", { class: "note" }, h[key]));
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
  const exit = fields(h, ["exitCode", "signal"]);
  if (exit) parts.push(exit);
  if (h.model) parts.push(el("p", { class: "fields model" }, modelSaid(h)));
  const used = h.resources;
  if (used) parts.push(el("p", { class: "fields used" }, `used ${used.cpuMs} ms of CPU · ${size(used.maxRssKb * 1024)} of memory at most`));
  if (h.ran) parts.push(el("details", {}, el("summary", {}, `ran ${commandLine(h.ran.argv)}: ${h.ran.status}`), pre(shown(h.ran))));
  // What a failed hook said stands open under its failure ("jq is missing: …").
  const failed = h.status !== "ok" && h.status !== "skipped";
  if (h.stdoutHead) parts.push(el("details", { open: failed }, el("summary", {}, `${ANSWER_WORDS[h.action] ?? PROCESS_ANSWER} (its head)`), printed(h.stdoutHead)));
  if (h.stdoutTail && h.stdoutTail !== h.stdoutHead) {
    parts.push(el("details", { class: "said", open: failed }, el("summary", {}, "stdout (its tail)"), printed(h.stdoutTail)));
  }
  if (h.stderrTail) parts.push(el("details", { class: "said", open: failed }, el("summary", {}, "stderr (its tail)"), printed(h.stderrTail)));
  return el("div", { class: "hook" }, ...parts);
}

/** `original → new` for an applied hook: both values, and their lines that differ. */
function diffBlock(original, value) {
  const before = shown(original);
  const after = shown(value);
  // The mark is seen, its word heard: an `aria-label` on a plain span is not read.
  const rows = lineDiff(before, after).map(([mark, text]) =>
    el(
      "div",
      { class: mark === "+" ? "add" : mark === "-" ? "del" : "same" },
      el("span", { class: "mark", "aria-hidden": "true" }, mark),
      mark === " " ? null : el("span", { class: "visually-hidden" }, mark === "+" ? "added: " : "removed: "),
      text,
    ),
  );
  return el(
    "figure",
    { class: "diff" },
    el("figcaption", {}, "original → new"),
    el("div", { class: "diff-sides" }, el("div", {}, el("span", { class: "label" }, "original"), pre(before, "before")), el("div", { class: "arrow", "aria-hidden": "true" }, "→"), el("div", {}, el("span", { class: "label" }, "new"), pre(after, "after"))),
    el("div", { class: "diff-lines", role: "group", "aria-label": "lines changed" }, ...rows),
  );
}
