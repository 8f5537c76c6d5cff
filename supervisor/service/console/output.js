// The script's output as a virtualised list: only the lines in view (and a few around them)
// are in the page, so a run of millions of lines scrolls as smoothly as one of ten. Colours
// (ANSI SGR) are read as the lines come, each stream carrying its style from line to line,
// so a line drawn alone still has the colour an earlier line set.

import { hasEscapes, overwritten, parse, PLAIN, styleNode } from "./ansi.js";
import { el, when } from "./dom.js";
import { FrameType } from "./tables.js";

/** Pixels per line: fixed, so any line's place is its index times this (see console.css). */
export const ROW = 20;
/** Lines drawn above and below the visible ones. */
const OVERSCAN = 30;
/** Characters of one line drawn at most: a longer line says how much more it holds. */
const LINE_CHARS = 2000;
/** The tallest scrolling area used; taller outputs map the scroll position onto it. */
const MAX_HEIGHT = 8_000_000;
/** The streams whose style carries from one frame to the next (a terminal's). */
const CARRIED = new Set([FrameType.STDOUT, FrameType.STDERR]);
/** A frame at least this long may be a piece of a longer line the server cut (at 64 KiB of
 * UTF-8): an escape sequence cut at its end is completed by the next frame of its stream. */
const PIECE_CHARS = 16384;
/** An escape sequence cut short at the end of a text. */
const CUT = /(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*$|\x1b$/;

export class OutputList {
  /** `link(seq)`: the address of a frame (each line's number links to its frame). */
  constructor(label, link = () => null) {
    this.link = link;
    this.lines = []; // [seq, stream, text or pieces, at]
    this.styles = {}; // the style each stream is in after its last line
    this.tails = {}; // a sequence cut at the end of a stream's last frame, for its next one
    this.pending = false;
    this.follow = true;
    this.times = false; // each line's time stamp shown
    this.marked = null; // the seq of the frame the address points at
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

  /** Adds a frame's lines; the view is drawn at the next animation frame. */
  push(seq, stream, text, at) {
    // A frame's text may hold several lines (a log message): each is a row.
    const carried = CARRIED.has(stream);
    let style = carried ? this.styles[stream] || PLAIN : PLAIN;
    text = String(text);
    if (carried) {
      text = (this.tails[stream] || "") + text;
      this.tails[stream] = "";
      const cut = text.length >= PIECE_CHARS ? CUT.exec(text) : null;
      if (cut) {
        this.tails[stream] = cut[0];
        text = text.slice(0, cut.index);
      }
    }
    for (const part of text.split("\n")) {
      if (style === PLAIN && !hasEscapes(part)) {
        this.lines.push([seq, stream, part.includes("\r") ? overwritten([{ text: part, style: PLAIN }])[0]?.text ?? "" : part, at]);
        continue;
      }
      const read = parse(part, style);
      style = read.state;
      this.lines.push([seq, stream, part.includes("\r") ? overwritten(read.pieces) : read.pieces, at]);
    }
    if (carried) this.styles[stream] = style;
    this.schedule();
  }

  get length() {
    return this.lines.length;
  }

  /** The index of the first line of frame `seq` (lines are in seq order), or -1. */
  indexOf(seq) {
    let lo = 0;
    let hi = this.lines.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.lines[mid][0] < seq) lo = mid + 1;
      else hi = mid;
    }
    return lo < this.lines.length && this.lines[lo][0] === seq ? lo : -1;
  }

  /** Scrolls to frame `seq`'s first line, marked, a third of the way down the box. */
  reveal(seq) {
    const index = this.indexOf(seq);
    if (index < 0) return false;
    this.marked = seq;
    this.follow = false;
    this.size(); // the box as tall as all its lines first, or the scroll stops short
    const view = this.root.clientHeight || 400;
    this.root.scrollTop = Math.max(0, (index * ROW - view / 3) * this.scale);
    this.draw();
    return true;
  }

  showTimes(on) {
    this.times = on;
    this.schedule();
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

  size() {
    this.spacer.style.height = `${Math.max(this.lines.length * ROW * this.scale, ROW)}px`;
  }

  draw() {
    const total = this.lines.length;
    const scale = this.scale;
    this.size();
    if (this.follow) this.root.scrollTop = this.root.scrollHeight;
    const view = this.root.clientHeight || 400;
    const top = this.root.scrollTop / scale;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    const last = Math.min(total, Math.ceil((top + view) / ROW) + OVERSCAN);
    this.rows.style.transform = `translateY(${this.root.scrollTop - (top - first * ROW)}px)`;
    const rows = [];
    for (let i = first; i < last; i++) rows.push(this.row(i));
    this.rows.replaceChildren(...rows);
    this.first = first;
  }

  row(i) {
    const [seq, stream, content, at] = this.lines[i];
    const href = this.link(seq);
    const number = href ? el("a", { class: "n", href, "aria-label": `line ${i + 1}, frame ${seq}`, tabindex: "-1" }, String(i + 1)) : el("span", { class: "n", "aria-hidden": "true" }, String(i + 1));
    return el(
      "div",
      { class: `line ${stream}${seq === this.marked ? " marked" : ""}`, role: "listitem", "data-seq": seq },
      number,
      this.times ? el("span", { class: "at" }, when(at)) : null,
      el("span", { class: "s" }, stream === FrameType.STDOUT ? "" : stream),
      ...drawn(content),
    );
  }
}

/** A line's text, or its styled pieces as spans, cut at `LINE_CHARS` saying how much more. */
function drawn(content) {
  if (typeof content === "string") {
    return [content.length > LINE_CHARS ? `${content.slice(0, LINE_CHARS)}${more(content.length)}` : content];
  }
  const nodes = [];
  let room = LINE_CHARS;
  let length = 0;
  for (const piece of content) {
    length += piece.text.length;
    if (room <= 0) continue;
    const text = piece.text.slice(0, room);
    room -= text.length;
    nodes.push(styleNode(el("span", {}, text), piece.style));
  }
  if (length > LINE_CHARS) nodes.push(more(length));
  return nodes;
}

function more(length) {
  return ` … (${(length - LINE_CHARS).toLocaleString("en")} more characters)`;
}
