// Small helpers for building the page: elements, times, values as text.

/** The characters that reorder the text after them (Unicode's explicit bidirectional
 * embeddings, overrides and isolates, U+202A–U+202E and U+2066–U+2069): a U+202E in a run's
 * argv or output would show the rest of the line backwards, a command line that is not the
 * one that ran. A terminal does not reorder them; the page shows each as its escape. */
const REORDERING = /[\u202a-\u202e\u2066-\u2069]/g;

/** `text` with each reordering character written as its escape (`\u202e`). */
export function visible(text) {
  return String(text).replace(REORDERING, escape);
}

/** An element: `el("p", {class: "x"}, "text", child)`. Attributes starting with "on" are
 * listeners; `null`/`false` children are skipped. Text is always text, never HTML, and no
 * character in it reorders what follows (`visible`). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else if (key === "class") {
      node.className = value;
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return node;
}

/** "1.2 s", "35 ms", "2 min 3 s"; "—" when unknown. */
export function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  const minutes = Math.floor(ms / 60000);
  const seconds = Math.round((ms % 60000) / 1000);
  return seconds ? `${minutes} min ${seconds} s` : `${minutes} min`;
}

/** A size for a person, as the command line says one (`512 bytes`, `9.8 MiB`, `2 MiB`). */
export function size(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  let shown = bytes;
  for (const unit of ["KiB", "MiB", "GiB", "TiB"]) {
    shown /= 1024;
    const tenth = Math.round(shown * 10) / 10;
    if (tenth < 1024 || unit === "TiB") return `${tenth} ${unit}`;
  }
  return `${bytes} bytes`;
}

/** A timestamp as the local time of day (the date too when it is not today). */
export function when(at) {
  if (!at) return "";
  const date = new Date(at);
  if (Number.isNaN(date.getTime())) return String(at);
  const today = new Date().toDateString() === date.toDateString();
  return today ? date.toLocaleTimeString() : date.toLocaleString();
}

/** `text` cut to about `most` characters for a listener (at a space past its middle, if one
 * is there), "…" where it was cut; whole when it is that short. */
export function cut(text, most) {
  const chars = Array.from(String(text).slice(0, 2 * most + 2));
  if (chars.length <= most) return chars.join("");
  const head = chars.slice(0, most).join("");
  const space = head.lastIndexOf(" ");
  return `${(space > most / 2 ? head.slice(0, space) : head).trimEnd()}…`;
}

/** A JSON value as readable text (strings as they are). Long text is cut at `limit`. */
export function shown(value, limit = 20000) {
  let text;
  if (typeof value === "string") text = value;
  else {
    try {
      text = JSON.stringify(value, null, 2);
    } catch {
      text = String(value);
    }
  }
  if (text === undefined) text = "null";
  return text.length > limit ? `${text.slice(0, limit)}… (${text.length - limit} more characters)` : text;
}

/** A character Python's `str.isprintable` refuses (controls, format characters such as
 * U+202E, separators but the space, lone surrogates, unassigned code points). */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|(?! )\p{Zs}/u;
/** A character a shell quotes a word for (`shlex.quote`'s). */
const UNSAFE = /[^\w@%+=:,./-]/;
/** How `$'…'` writes the characters that have a short escape of their own. */
const SHORT = { "\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r" };

/** The argv of a run as one line, as a shell (bash) takes it back and as the command line
 * prints it (`runs list`): each word as `shlex.quote` writes it, and one holding a character
 * that is not printable in `$'…'`, that character escaped (`$'arg\x1b[31m'`, `\u202e`). */
export function commandLine(argv) {
  if (!Array.isArray(argv)) return "";
  return argv.map((w) => word(String(w))).join(" ");
}

function word(w) {
  if (UNPRINTABLE.test(w)) return `$'${Array.from(w, (c) => SHORT[c] ?? (UNPRINTABLE.test(c) ? escape(c) : c)).join("")}'`;
  if (!w) return "''";
  return UNSAFE.test(w) ? `'${w.replaceAll("'", `'"'"'`)}'` : w;
}

/** One character as bash's `$'…'` and Python write it: `\x1b`, `\u202e`, `\U0001f600`; a
 * byte that was no UTF-8 (a lone surrogate U+DC80–U+DCFF, as Python keeps it) as `\xff`. */
function escape(c) {
  const code = c.codePointAt(0);
  if (code >= 0xdc80 && code <= 0xdcff) return `\\x${(code - 0xdc00).toString(16).padStart(2, "0")}`;
  if (code < 0x80) return `\\x${code.toString(16).padStart(2, "0")}`;
  return code <= 0xffff ? `\\u${code.toString(16).padStart(4, "0")}` : `\\U${code.toString(16).padStart(8, "0")}`;
}

/** The least time between two things said through the live region: a run whose hooks end
 * by the dozen a second is said in a sentence or two, not one per hook. */
const QUIET_MS = 2000;
const said = { queue: [], timer: null, last: -Infinity };

/** Says `text` to screen readers through the page's polite live region, at most once every
 * `QUIET_MS`: what came meanwhile is said together, a question (`urgent`) in full, the rest
 * counted past the last one. */
export function announce(text, urgent = false) {
  said.queue.push({ text, urgent });
  if (said.timer === null) said.timer = setTimeout(speak, Math.max(0, said.last + QUIET_MS - performance.now()));
}

function speak() {
  said.timer = null;
  said.last = performance.now();
  const urgent = said.queue.filter((q) => q.urgent).map((q) => q.text);
  const rest = said.queue.filter((q) => !q.urgent).map((q) => q.text);
  said.queue = [];
  const told = rest.length > 2 ? [`${rest.length - 1} updates (see the page), the last: ${rest.at(-1)}`] : rest;
  const region = document.getElementById("announce");
  if (region) region.textContent = [...urgent, ...told].join("; ");
}

/** Lines that differ between two texts, as rows `[mark, line]`: " " same, "-" only in
 * `before`, "+" only in `after`. A longest-common-subsequence diff for texts up to 400 lines
 * each; past that, the whole of each side. */
export function lineDiff(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  if (a.length > 400 || b.length > 400) {
    return [...a.map((l) => ["-", l]), ...b.map((l) => ["+", l])];
  }
  const table = Array.from({ length: a.length + 1 }, () => new Uint16Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const rows = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      rows.push([" ", a[i]]);
      i++;
      j++;
    } else if (table[i + 1][j] >= table[i][j + 1]) {
      rows.push(["-", a[i++]]);
    } else {
      rows.push(["+", b[j++]]);
    }
  }
  while (i < a.length) rows.push(["-", a[i++]]);
  while (j < b.length) rows.push(["+", b[j++]]);
  return rows;
}
