// The hooks running now, from the event bus: a hook's `hook.started` event opens it, its
// `hook.finished` event closes it (a run's hook frame comes with that one). A run's view
// shows each open one as "running for N s", counted live from the event's time stamp, until
// its frame takes its place; a hook whose question is open (its `ask` frame drawn, not yet
// settled) as "waiting for an answer", counted from the question's time stamp.

import { el } from "./dom.js";
import { EventKind } from "./tables.js";

/** Runs whose hooks are followed at most (the oldest are let go past it). */
const RUNS = 200;

const key = (data) => `${data.on}\u0000${data.phase}\u0000${data.name}`;

export class RunningHooks {
  constructor() {
    this.runs = new Map(); // runId → Map(key → {balance, starts: [{name, on, phase, at}]})
    this.listeners = new Set();
  }

  /** Reads one event of the bus (every kind may come; only hooks' and runs' matter). */
  take(event) {
    const runId = event.runId;
    if (!runId || !event.data) return;
    if (event.kind === EventKind.RUN_FINISHED) {
      if (this.runs.delete(runId)) this.changed(runId);
      return;
    }
    const started = event.kind === EventKind.HOOK_STARTED;
    if (!started && event.kind !== EventKind.HOOK_FINISHED) return;
    let hooks = this.runs.get(runId);
    if (!hooks) {
      hooks = new Map();
      this.runs.set(runId, hooks);
      if (this.runs.size > RUNS) this.runs.delete(this.runs.keys().next().value);
    }
    const k = key(event.data);
    const entry = hooks.get(k) || { balance: 0, starts: [] };
    hooks.set(k, entry);
    // Counted, not paired by order: a replayed finish may come before its start.
    if (started) {
      entry.balance += 1;
      if (entry.balance > 0) entry.starts.push({ name: event.data.name, on: event.data.on, phase: event.data.phase, at: event.at });
    } else {
      entry.balance -= 1;
      entry.starts.shift();
    }
    if (entry.balance === 0) hooks.delete(k);
    this.changed(runId);
  }

  /** The hooks of `runId` running now, the longest running first. */
  of(runId) {
    const hooks = this.runs.get(runId);
    if (!hooks) return [];
    return [...hooks.values()].flatMap((e) => e.starts).sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
  }

  /** `listener(runId)` hears each change; returns the function that stops it. */
  listen(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  changed(runId) {
    for (const listener of this.listeners) listener(runId);
  }
}

/** "12 s", "3 min 5 s" since `at` (by this machine's clock against the time stamp); null
 * for a stamp that is not one. */
function since(at, now) {
  const seconds = Math.max(0, Math.floor((now - Date.parse(at)) / 1000));
  if (Number.isNaN(seconds)) return null;
  return seconds < 120 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

/** "running for 12 s" (by this machine's clock against the event's time stamp). */
export function runningFor(at, now = Date.now()) {
  const time = since(at, now);
  return time === null ? "running" : `running for ${time}`;
}

/** "asked 12 s ago" (against the `ask` frame's time stamp). */
export function askedAgo(at, now = Date.now()) {
  const time = since(at, now);
  return time === null ? "asked" : `asked ${time} ago`;
}

/** The list a run's view shows under its timeline: one row per running hook, its time
 * counted each second while there is one. */
export class RunningList {
  constructor() {
    this.root = el("ol", { class: "timeline running-hooks", "aria-label": "Hooks running now" });
    this.timer = null;
    this.shown = [];
  }

  /** `hooks` (`RunningHooks.of`); `asking`: hook name → the time stamp of its open question. */
  draw(hooks, asking = new Map()) {
    this.shown = hooks.map((h) => {
      const asked = asking.get(h.name);
      const say = asked === undefined ? (now) => runningFor(h.at, now) : (now) => askedAgo(asked, now);
      return { hook: h, waiting: asked !== undefined, say, time: el("span", { class: "running-for" }, say(Date.now())) };
    });
    this.root.replaceChildren(
      ...this.shown.map(({ hook, waiting, time }) =>
        el(
          "li",
          { class: "frame hook running", "data-hook": hook.name },
          el("span", { class: "seq" }, "…"),
          el("span", { class: "type" }, "hook"),
          el(
            "p",
            { class: "hook-line" },
            el("strong", { class: "name" }, hook.name),
            " ",
            el("span", { class: "phase" }, `${hook.on}.${hook.phase}`),
            " ",
            waiting ? el("span", { class: "badge asking" }, "waiting for an answer") : el("span", { class: "badge running" }, "running"),
            " ",
            time,
          ),
        ),
      ),
    );
    this.root.hidden = this.shown.length === 0;
    if (this.shown.length && this.timer === null) this.timer = setInterval(() => this.tick(), 1000);
    if (!this.shown.length) this.stop();
  }

  tick() {
    const now = Date.now();
    for (const { say, time } of this.shown) time.textContent = say(now);
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
  }
}
