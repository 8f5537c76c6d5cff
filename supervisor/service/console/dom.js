// Small helpers for building the page: elements, times, values as text.

/** An element: `el("p", {class: "x"}, "text", child)`. Attributes starting with "on" are
 * listeners; `null`/`false` children are skipped. Text is always text, never HTML. */
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
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
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

/** A timestamp as the local time of day (the date too when it is not today). */
export function when(at) {
  if (!at) return "";
  const date = new Date(at);
  if (Number.isNaN(date.getTime())) return String(at);
  const today = new Date().toDateString() === date.toDateString();
  return today ? date.toLocaleTimeString() : date.toLocaleString();
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

/** The argv of a run as one line, quoted where a word needs it. */
export function commandLine(argv) {
  if (!Array.isArray(argv)) return "";
  return argv.map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${String(w).replaceAll("'", "'\\''")}'`)).join(" ");
}

/** Says `text` to screen readers through the page's polite live region. */
export function announce(text) {
  const region = document.getElementById("announce");
  if (region) region.textContent = text;
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
