// Searching the runs' output, logs, advice, hook names, argv and errors: `GET /v1/search`,
// in every stored run or in the run that is open. Each match links to its run, opened at
// its frame (`#/runs/ID@seq`). What is typed is sent as it is: words and quoted phrases.
// Where the words are in each match's line is the server's to say (`marks`), as its index
// found them: case and accents aside, a phrase with whatever stands between its words, each
// CJK character and each emoji a word.

import { plainText } from "./ansi.js";
import { el } from "./dom.js";
import { getJson } from "./net.js";
import { runLink } from "./run.js";

/** Matches asked for at most. */
export const LIMIT = 100;

/** The address of a search: `#/search?q=…` (and `&run=ID` for one run's). */
export function searchLink(q, run = null) {
  const query = new URLSearchParams({ q });
  if (run) query.set("run", run);
  return `#/search?${query}`;
}

/** Asks the server and draws the matches in `into`; returns the matches (or null). */
export async function search(into, q, run = null) {
  const words = q.trim();
  if (!words) {
    into.replaceChildren(el("p", { class: "hint" }, "Type words to search for, or a phrase in quotes."));
    return null;
  }
  const where = run ? `in run ${run}` : "in all runs";
  into.replaceChildren(el("p", { class: "hint", role: "status" }, `Searching ${where}…`));
  const query = new URLSearchParams({ q: words, limit: String(LIMIT) });
  if (run) query.set("run", run);
  let answer;
  try {
    answer = await getJson(`/v1/search?${query}`);
  } catch (error) {
    answer = { status: 0, body: { message: String(error.message || error) } };
  }
  if (answer.status !== 200 || !Array.isArray(answer.body)) {
    const why = answer.body && answer.body.message ? answer.body.message : `the server answered ${answer.status}`;
    into.replaceChildren(el("p", { class: "message", role: "status" }, `The search failed: ${why}`));
    return null;
  }
  const matches = answer.body;
  const said = matches.length === 0 ? "No match" : matches.length >= LIMIT ? `The newest ${matches.length} matches` : `${matches.length} match${matches.length === 1 ? "" : "es"}`;
  into.replaceChildren(
    el("p", { class: "search-said", role: "status" }, `${said} for ${words.includes('"') ? words : `“${words}”`} ${where}.`),
    el("ol", { class: "matches" }, ...matches.map(match)),
  );
  return matches;
}

function match(m) {
  return el(
    "li",
    { class: "match" },
    el(
      "a",
      { href: runLink(m.runId, m.seq) },
      el("span", { class: "match-where" }, el("code", {}, m.runId), ` #${m.seq} `, el("span", { class: "type" }, m.type)),
      el("span", { class: "snippet" }, ...marked(m.snippet ?? "", m.marks)),
      pieceSaid(m) ? el("span", { class: "piece" }, ` [${pieceSaid(m)}]`) : null,
    ),
  );
}

/** What a match in a piece of a line too long for one frame adds, as `runs search` says it:
 * which piece, and the frames that hold the whole line; null for any other match. */
export function pieceSaid(m) {
  const line = m && m.line;
  const whole = line && ["from", "to", "piece", "pieces"].every((k) => Number.isInteger(line[k]));
  return whole ? `piece ${line.piece} of ${line.pieces} of a line too long for one frame: the ${m.type} frames ${line.from} to ${line.to} joined` : null;
}

/** The snippet with each of its `marks` (`[start, end]`, in characters: code points) in a
 * `<mark>`, as text nodes only, never markup; the rest as a terminal shows it. */
export function marked(snippet, marks) {
  const chars = Array.from(snippet);
  const out = [];
  let at = 0;
  for (const mark of Array.isArray(marks) ? marks : []) {
    const [start, end] = Array.isArray(mark) ? mark : [];
    if (!(start >= at && end > start && end <= chars.length)) continue;
    out.push(plainText(chars.slice(at, start).join("")), el("mark", {}, plainText(chars.slice(start, end).join(""))));
    at = end;
  }
  out.push(plainText(chars.slice(at).join("")));
  return out.filter((p) => p !== "");
}
