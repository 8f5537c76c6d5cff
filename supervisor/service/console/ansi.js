// Terminal colours in a script's output: ANSI SGR sequences (ESC [ … m) read into styled
// pieces of text, every other escape sequence dropped, so that no escape code ever shows.
// A stream's style carries from one line (one frame) to the next, as a terminal's does:
// `parse(text, state)` starts from `state` and gives the state after the text.

/** No style: what a stream starts with, and what `ESC [ 0 m` goes back to. */
export const PLAIN = Object.freeze({ fg: null, bg: null, bold: false, dim: false, italic: false, underline: false, inverse: false, strike: false });

// A CSI sequence (ESC [ or the one-byte CSI, parameters, intermediates, a final byte); a CSI
// cut short (its parameters dropped with it); an OSC or other string sequence (ending in BEL
// or ESC \, or at the end of the text); any other ESC with what it introduces (or alone).
const ESCAPES = /(?:\x1b\[|\x9b)([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])|(?:\x1b\[|\x9b)[\x20-\x3f]*|(?:\x1b[\]PX^_]|[\x90\x9d\x9e\x9f])[\s\S]*?(?:\x07|\x1b\\|\x9c|$)|\x1b[\x20-\x2f]*[\x30-\x7e]?/g;
/** The parameters of an SGR sequence (a private one, `ESC [ > 4 m`, is not one). */
const SGR_PARAMS = /^[\d;:]*$/;

/** The text and the state after it: `{pieces: [{text, style}], state}`; `style` is the
 * state in force for that text (a frozen object, `PLAIN` when unstyled). */
export function parse(text, state = PLAIN) {
  const pieces = [];
  let at = 0;
  let style = state;
  const add = (piece) => {
    if (!piece) return;
    const last = pieces[pieces.length - 1];
    if (last && last.style === style) last.text += piece;
    else pieces.push({ text: piece, style });
  };
  ESCAPES.lastIndex = 0;
  for (let m = ESCAPES.exec(text); m; m = ESCAPES.exec(text)) {
    add(text.slice(at, m.index));
    at = m.index + m[0].length;
    if (m[3] === "m" && !m[2] && SGR_PARAMS.test(m[1])) style = sgr(style, m[1]);
  }
  add(text.slice(at));
  return { pieces, state: style };
}

/** Styled pieces as a terminal leaves them: each carriage return (`\r`, a progress bar's)
 * takes the cursor back to its line's start, and what follows writes over what was there,
 * each character in the style it was written in (`"50%\r100%"` is `100%`, `"abcdef\rxy"` is
 * `xycdef`, a `\r` before a line's end is nothing). Linear in the text's length. */
export function overwritten(pieces) {
  const out = [];
  const add = (c, style) => {
    const last = out[out.length - 1];
    if (last && last.style === style) last.text += c;
    else out.push({ text: c, style });
  };
  let cells = [];
  let at = 0;
  const flush = () => {
    for (const [c, style] of cells) add(c, style);
    cells = [];
    at = 0;
  };
  for (const { text, style } of pieces) {
    for (const c of text) {
      if (c === "\r") at = 0;
      else if (c === "\n") {
        flush();
        add(c, style);
      } else cells[at++] = [c, style];
    }
  }
  flush();
  return out;
}

/** Text without any escape sequence (what a search or a title shows). */
export function plainText(text) {
  return parse(String(text)).pieces.map((p) => p.text).join("");
}

/** Whether a text may hold an escape sequence at all (the fast path skips those that do not). */
export function hasEscapes(text) {
  return /[\x1b\x90-\x9f]/.test(text);
}

/** The state after one SGR sequence's parameters (`"1;31"`, `"38;5;208"`, `"38:2::255:0:0"`). */
export function sgr(state, params) {
  const next = { ...state };
  const codes = params === "" ? [[0]] : params.split(";").map((p) => p.split(":").map((n) => (n === "" ? 0 : Number(n))));
  for (let i = 0; i < codes.length; i++) {
    const [code, ...sub] = codes[i];
    if (code === 38 || code === 48 || code === 58) {
      // Extended colour: `38;5;N`, `38;2;R;G;B`, or the same with colons in one parameter.
      let form;
      let values;
      if (sub.length) {
        form = sub[0];
        values = form === 2 && sub.length >= 5 ? sub.slice(2, 5) : sub.slice(1);
      } else {
        form = codes[i + 1] ? codes[i + 1][0] : undefined;
        const count = form === 5 ? 1 : form === 2 ? 3 : 0;
        values = codes.slice(i + 2, i + 2 + count).map((c) => c[0]);
        i += 1 + count;
      }
      const colour = extended(form, values);
      if (code === 38) next.fg = colour ?? next.fg;
      else if (code === 48) next.bg = colour ?? next.bg;
      continue;
    }
    apply(next, code);
  }
  return same(next, state) ? state : same(next, PLAIN) ? PLAIN : Object.freeze(next);
}

function apply(s, code) {
  if (code === 0) Object.assign(s, PLAIN);
  else if (code === 1) s.bold = true;
  else if (code === 2) s.dim = true;
  else if (code === 3) s.italic = true;
  else if (code === 4) s.underline = true;
  else if (code === 7) s.inverse = true;
  else if (code === 9) s.strike = true;
  else if (code === 21 || code === 22) {
    s.bold = false;
    s.dim = false;
  } else if (code === 23) s.italic = false;
  else if (code === 24) s.underline = false;
  else if (code === 27) s.inverse = false;
  else if (code === 29) s.strike = false;
  else if (code >= 30 && code <= 37) s.fg = code - 30;
  else if (code === 39) s.fg = null;
  else if (code >= 40 && code <= 47) s.bg = code - 40;
  else if (code === 49) s.bg = null;
  else if (code >= 90 && code <= 97) s.fg = code - 90 + 8;
  else if (code >= 100 && code <= 107) s.bg = code - 100 + 8;
  // Anything else (blink, fonts, overline…) is read and left out.
}

/** A 256-colour index (0–15 stay indexes: the page's palette draws those), or `#rrggbb`. */
function extended(form, values) {
  const ok = (n) => Number.isInteger(n) && n >= 0 && n <= 255;
  if (form === 5 && ok(values[0])) return values[0] < 16 ? values[0] : rgb(...cube(values[0]));
  if (form === 2 && values.length === 3 && values.every(ok)) return rgb(...values);
  return null;
}

function cube(n) {
  if (n >= 232) {
    const grey = 8 + (n - 232) * 10;
    return [grey, grey, grey];
  }
  const i = n - 16;
  const level = (v) => (v === 0 ? 0 : 55 + v * 40);
  return [level(Math.floor(i / 36)), level(Math.floor(i / 6) % 6), level(i % 6)];
}

function rgb(r, g, b) {
  return `#${[r, g, b].map((v) => v.toString(16).padStart(2, "0")).join("")}`;
}

function same(a, b) {
  for (const key of Object.keys(PLAIN)) if (a[key] !== b[key]) return false;
  return true;
}

/** Styles one piece of text in `node` (a span): classes for the 16 palette colours and the
 * attributes (the page's stylesheet draws them for its theme), the style's own colour for
 * 256-colour and truecolor (set through the element's style, which the page's policy allows). */
export function styleNode(node, style) {
  if (style === PLAIN) return node;
  let fg = style.fg;
  let bg = style.bg;
  if (style.inverse) [fg, bg] = [bg ?? "fg", fg ?? "bg"];
  const classes = [];
  if (style.bold) classes.push("sgr-bold");
  if (style.dim) classes.push("sgr-dim");
  if (style.italic) classes.push("sgr-italic");
  if (style.underline) classes.push("sgr-underline");
  if (style.strike) classes.push("sgr-strike");
  const colour = (value, which) => {
    if (value === null || value === undefined) return;
    if (typeof value === "number") classes.push(`sgr-${which}${value}`);
    else if (value === "fg" || value === "bg") classes.push(`sgr-${which}-${value}`);
    else node.style[which === "fg" ? "color" : "backgroundColor"] = value;
  };
  colour(fg, "fg");
  colour(bg, "bg");
  if (classes.length) node.className = classes.join(" ");
  return node;
}
