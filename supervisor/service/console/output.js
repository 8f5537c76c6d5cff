// The script's output as a virtualised list: only the lines in view (and a few around them)
// are in the page, so a run of millions of lines scrolls as smoothly as one of ten.

import { el } from "./dom.js";
import { FrameType } from "./tables.js";

/** Pixels per line: fixed, so any line's place is its index times this (see console.css). */
export const ROW = 20;
/** Lines drawn above and below the visible ones. */
const OVERSCAN = 30;
/** Characters of one line drawn at most: a longer line says how much more it holds. */
const LINE_CHARS = 2000;
/** The tallest scrolling area used; taller outputs map the scroll position onto it. */
const MAX_HEIGHT = 8_000_000;

export class OutputList {
  constructor(label) {
    this.lines = []; // [seq, stream, text]
    this.pending = false;
    this.follow = true;
    this.root = el("div", { class: "output", tabindex: "0", role: "region", "aria-label": label });
    this.spacer = el("div", { class: "output-spacer" });
    this.rows = el("div", { class: "output-rows", role: "list" });
    this.spacer.append(this.rows);
    this.root.append(this.spacer);
    this.root.addEventListener("scroll", () => {
      const bottom = this.root.scrollTop + this.root.clientHeight >= this.root.scrollHeight - ROW;
      this.follow = bottom;
      this.schedule();
    });
  }

  /** Adds lines; the view is drawn at the next animation frame. */
  push(seq, stream, text) {
    // A frame's text may hold several lines (a log message): each is a row.
    const parts = String(text).split("\n");
    for (const part of parts) this.lines.push([seq, stream, part]);
    this.schedule();
  }

  get length() {
    return this.lines.length;
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
  }

  /** Scroll position → first line, through the scale a very tall output needs. */
  get scale() {
    const height = this.lines.length * ROW;
    return height > MAX_HEIGHT ? MAX_HEIGHT / height : 1;
  }

  draw() {
    const total = this.lines.length;
    const scale = this.scale;
    this.spacer.style.height = `${Math.max(total * ROW * scale, ROW)}px`;
    if (this.follow) this.root.scrollTop = this.root.scrollHeight;
    const view = this.root.clientHeight || 400;
    const top = this.root.scrollTop / scale;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    const last = Math.min(total, Math.ceil((top + view) / ROW) + OVERSCAN);
    this.rows.style.transform = `translateY(${this.root.scrollTop - (top - first * ROW)}px)`;
    const rows = [];
    for (let i = first; i < last; i++) {
      const [seq, stream, text] = this.lines[i];
      rows.push(
        el(
          "div",
          { class: `line ${stream}`, role: "listitem" },
          el("span", { class: "n", "aria-hidden": "true" }, String(i + 1)),
          el("span", { class: "s" }, stream === FrameType.STDOUT ? "" : stream),
          text.length > LINE_CHARS ? `${text.slice(0, LINE_CHARS)} … (${(text.length - LINE_CHARS).toLocaleString("en")} more characters)` : text,
        ),
      );
    }
    this.rows.replaceChildren(...rows);
    this.first = first;
  }
}
