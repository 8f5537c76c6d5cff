// The retained runs, newest first: status, duration, and the hooks that refused or failed.
// Refetched whenever the event stream says a run started or finished.

import { commandLine, cut, duration, el, visible, when } from "./dom.js";
import { getJson } from "./net.js";

/** The most characters of its command line a run's link says aloud: a forty-line
 * `python -c '…'` is not read out whole (the run's page shows it whole, and so does the
 * command's title). */
const SAID_COMMAND = 60;
/** The most hook names each of its flags says aloud (`failed: a, b, c and 4 more`). */
const SAID_HOOKS = 3;

function some(names) {
  const more = names.length - SAID_HOOKS;
  return more > 0 ? `${names.slice(0, SAID_HOOKS).join(", ")} and ${more} more` : names.join(", ");
}

/** A run's link's name, for a listener: its status, its command line cut, when it started,
 * how long it took, its exit code, and the hooks that refused it or failed. */
function spoken(run, command) {
  const shown = cut(command, SAID_COMMAND);
  const parts = [
    `${run.status} ${run.argvCut > 0 && !shown.endsWith("…") ? `${shown} …` : shown}`,
    `started ${when(run.startedAt)}`,
    run.status !== "running" && run.durationMs == null ? "duration unknown" : duration(run.durationMs),
    run.exitCode !== null && run.exitCode !== undefined ? `exit ${run.exitCode}` : null,
    run.refused && run.refused.length ? `refused by ${some(run.refused)}` : null,
    run.failed && run.failed.length ? `failed: ${some(run.failed)}` : null,
  ];
  return parts.filter((p) => p !== null && p !== "—").join(", ");
}

export class RunsList {
  constructor({ list, count, empty }) {
    this.list = list;
    this.count = count;
    this.empty = empty;
    this.known = new Set();
    this.items = new Map(); // runId → {li, link, text}
    this.selected = null;
    this.fetching = false;
    this.again = false;
  }

  /** Fetches `/v1/runs` and draws it; one fetch at a time (a request meanwhile runs after). */
  async refresh() {
    if (this.fetching) {
      this.again = true;
      return null;
    }
    this.fetching = true;
    try {
      const { status, body } = await getJson("/v1/runs");
      if (status === 200 && Array.isArray(body)) this.draw(body);
      return { status, body };
    } catch {
      return null;
    } finally {
      this.fetching = false;
      if (this.again) {
        this.again = false;
        this.refresh();
      }
    }
  }

  /** Draws the list, keeping each run's element (and so the keyboard's focus on it): a run
   * whose summary changed gets new contents, not a new element. */
  draw(runs) {
    this.known = new Set(runs.map((r) => r.runId));
    this.count.textContent = runs.length ? `(${runs.length})` : "";
    this.empty.hidden = runs.length > 0;
    const items = [];
    for (const run of runs) {
      const text = JSON.stringify(run);
      let entry = this.items.get(run.runId);
      if (!entry) {
        const link = el("a", { href: `#/runs/${encodeURIComponent(run.runId)}` });
        entry = { li: el("li", { "data-run": run.runId }, link), link, text: null };
        this.items.set(run.runId, entry);
      }
      if (entry.text !== text) {
        entry.text = text;
        entry.li.className = `run-item ${run.status}`;
        const command = commandLine(run.argv) || run.runId;
        entry.link.replaceChildren(...this.contents(run, command).filter((c) => c !== null));
        entry.link.setAttribute("aria-label", visible(spoken(run, command)));
        if (run.runId === this.selected) entry.link.setAttribute("aria-current", "page");
      }
      items.push(entry.li);
    }
    for (const id of [...this.items.keys()]) if (!this.known.has(id)) this.items.delete(id);
    // Moves only what is out of place: an element moved loses the focus it holds.
    items.forEach((li, i) => {
      if (this.list.children[i] !== li) this.list.insertBefore(li, this.list.children[i] || null);
    });
    while (this.list.children.length > items.length) this.list.lastElementChild.remove();
  }

  contents(run, command) {
    const refused = run.refused || [];
    const failed = run.failed || [];
    return [
      el("span", { class: `badge ${run.status}` }, run.status),
      " ",
      el("code", { class: "cmd", title: command }, command),
      // (a long argv is cut in listings; the run's own page shows it whole)
      run.argvCut > 0 ? el("span", { class: "meta" }, ` … (${run.argvCut} argument(s) cut)`) : null,
      el(
        "span",
        { class: "meta" },
        `${when(run.startedAt)} · ${run.status !== "running" && run.durationMs == null ? "duration unknown" : duration(run.durationMs)}`,
        run.exitCode !== null && run.exitCode !== undefined ? ` · exit ${run.exitCode}` : "",
      ),
      refused.length ? el("span", { class: "flag refused" }, `refused by ${refused.join(", ")}`) : null,
      failed.length ? el("span", { class: "flag failed" }, `failed: ${failed.join(", ")}`) : null,
    ];
  }

  select(runId) {
    this.selected = runId;
    for (const a of this.list.querySelectorAll("a")) {
      const on = a.parentElement.dataset.run === runId;
      if (on) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
  }
}
