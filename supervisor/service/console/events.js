// The event bus as it happens, with the gaps this page missed. Resumes after a lost socket
// from the next seq; the page keeps the last LIMIT events (more than the bus holds, so a
// replay from the start keeps its gap in view).

import { el, when } from "./dom.js";

const LIMIT = 1500;

export class EventsView {
  constructor(list) {
    this.list = list;
    this.last = null; // the last seq seen
  }

  take(obj) {
    if (obj.kind === "gap") {
      this.add(el("li", { class: "event gap" }, el("strong", {}, "gap"), ` events ${obj.from}–${obj.to} were missed (the page fell behind, or the server no longer holds them)`));
      if (typeof obj.to === "number") this.last = obj.to;
      return;
    }
    if (typeof obj.seq !== "number") return;
    this.last = obj.seq;
    const data = obj.data && Object.keys(obj.data).length ? JSON.stringify(obj.data) : "";
    this.add(
      el(
        "li",
        { class: `event ${obj.kind.split(".")[0]}` },
        el("span", { class: "seq" }, `#${obj.seq}`),
        el("span", { class: "at" }, when(obj.at)),
        el("strong", { class: "kind" }, obj.kind),
        obj.runId ? el("a", { href: `#/runs/${encodeURIComponent(obj.runId)}` }, obj.runId) : null,
        data ? el("code", { class: "data" }, data.length > 300 ? `${data.slice(0, 300)}…` : data) : null,
      ),
    );
  }

  note(text) {
    this.add(el("li", { class: "event note" }, text));
  }

  add(item) {
    this.list.append(item);
    while (this.list.childElementCount > LIMIT) this.list.firstElementChild.remove();
  }

  /** Where to resume: the seq after the last one seen, else the first. */
  get since() {
    return this.last === null ? 0 : this.last + 1;
  }
}
