// Searching the runs' output, logs, advice, hook names, argv and errors: `GET /v1/search`,
// in every stored run or in the run that is open. Each match links to its run, opened at
// its frame (`#/runs/ID@seq`). What is typed is sent as it is: words and quoted phrases.

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
    el("ol", { class: "matches" }, ...matches.map((m) => match(m, terms(words)))),
  );
  return matches;
}

function match(m, words) {
  return el(
    "li",
    { class: "match" },
    el(
      "a",
      { href: runLink(m.runId, m.seq) },
      el("span", { class: "match-where" }, el("code", {}, m.runId), ` #${m.seq} `, el("span", { class: "type" }, m.type)),
      el("span", { class: "snippet" }, ...marked(plainText(m.snippet ?? ""), words)),
    ),
  );
}

/** The words and phrases of a query, for marking them in a snippet. */
export function terms(q) {
  const found = [];
  for (const m of q.matchAll(/"([^"]+)"|(\S+)/g)) {
    const term = (m[1] ?? m[2]).replaceAll('"', "").trim();
    if (term) found.push(term.toLowerCase());
  }
  return found;
}

/** The text with each occurrence of a term in a `<mark>` (text nodes only, never markup). */
export function marked(text, words) {
  if (!words.length) return [text];
  const escaped = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const pattern = new RegExp(`(${escaped.join("|")})`, "gi");
  return text.split(pattern).map((part, i) => (i % 2 ? el("mark", {}, part) : part)).filter((p) => p !== "");
}
