// The console: which view is shown (from the address's #fragment), the event stream that
// keeps the runs list live, and what the page says when the server goes and comes back.

import { announce, el } from "./dom.js";
import { EventsView } from "./events.js";
import { drawHooks, fetchHooks } from "./hooks.js";
import { getJson, Socket } from "./net.js";
import { RunView } from "./run.js";
import { RunningHooks } from "./running.js";
import { RunsList } from "./runs.js";
import { search, searchLink } from "./search.js";
import { Close, ServiceMessage } from "./tables.js";

const $ = (id) => document.getElementById(id);

const page = {
  runs: null,
  events: null,
  stream: null,
  run: null,
  // The run the search box's "this run" means: the one open, or the last one opened.
  lastRun: null,
  running: new RunningHooks(),
  lost: false,
  restarted: false,
  // The server closed the event stream saying it is shutting down (SIGTERM): the runs it
  // lets finish still stream, so it is not said to be unreachable.
  stopping: false,
};

function banner(text) {
  const b = $("banner");
  b.hidden = !text;
  b.textContent = text || "";
}

function link(text, state) {
  const l = $("link");
  l.textContent = text;
  l.dataset.state = state;
}

function showLogin(why) {
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "login";
  for (const o of document.querySelectorAll(".origin")) o.textContent = location.origin;
  if (why) $("login-why").textContent = why;
  link("not signed in", "out");
}

/** Says once per restart what became of the runs listed before: kept (a server with a run
 * history lists them again) or gone. */
async function restarted() {
  if (page.restarted) return;
  page.restarted = true;
  let listed = null;
  try {
    const { status, body } = await getJson("/v1/runs");
    if (status === 200 && Array.isArray(body)) listed = new Set(body.map((r) => r.runId));
  } catch {
    listed = null;
  }
  const before = page.knownAtLoss || new Set();
  const kept = listed !== null && [...before].some((id) => listed.has(id));
  banner(
    kept
      ? "The server restarted: the runs it kept are listed again, and new runs show as they start."
      : "The server restarted: the runs it held before are gone. New runs show as they start.",
  );
  page.events.note("the server restarted");
  page.runs.refresh();
}

/** The server is back after a lost connection: were its runs kept? */
async function back() {
  const before = page.knownAtLoss || new Set();
  const got = await page.runs.refresh();
  if (got && got.status === 401) {
    showLogin("The server no longer takes this browser's cookie: it has a new token (serve --new-token).");
    return;
  }
  const kept = [...before].some((id) => page.runs.known.has(id));
  if (before.size > 0 && !kept) restarted();
  // The hooks in force are the new server's: read them again if they are shown.
  if (location.hash.startsWith("#/hooks")) route();
}

/** A socket lost while the server is up but refuses this browser's cookie (it has a new
 * token): the login, and no more reconnecting, which would be refused as long. */
async function refused() {
  let got;
  try {
    got = await page.runs.refresh();
  } catch {
    return; // the server is down: reconnecting goes on
  }
  if (got && got.status === 401) {
    page.stream.close();
    showLogin("The server no longer takes this browser's cookie: it has a new token (serve --new-token).");
  }
}

function openEvents() {
  page.stream = new Socket({
    // From the oldest event the bus still holds (a gap first when it holds no longer all),
    // then from the next one after each lost socket.
    path: () => `/v1/events?since=${page.events.since}`,
    done: () => false,
    onObject: (obj) => {
      if (obj.type === ServiceMessage.ERROR && !("seq" in obj)) {
        // `since` was never published here: another server (a restart) answers now.
        if (obj.code === Close.OUT_OF_RANGE) {
          page.events.last = null;
          restarted();
        }
        return;
      }
      page.events.take(obj);
      page.running.take(obj);
      if (typeof obj.kind === "string" && (obj.kind.startsWith("run.") || obj.kind.startsWith("hook."))) {
        page.runs.refresh();
      }
    },
    onState: (state, closed) => {
      if (state === "open") {
        link("live", "live");
        page.stopping = false;
        if (page.lost) {
          page.lost = false;
          back();
        }
      } else if (state === "lost") {
        page.restarted = false;
        const going = closed && closed.code === Close.GOING_AWAY;
        if (!page.lost) {
          announce(going ? "the server is shutting down; runs under way may still finish" : "connection to the server lost; reconnecting");
          page.knownAtLoss = new Set(page.runs.known);
        }
        page.lost = true;
        if (going && !page.stopping) {
          page.stopping = true;
          if (page.run) page.run.stopping();
        }
        if (page.stopping) link("server shutting down: runs under way may still finish — reconnecting when it is back…", "stopping");
        else link("server unreachable — reconnecting…", "lost");
        refused();
      }
    },
  });
}

function show(view) {
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== `view-${view}`;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

/** `note`: what the run's page says first (a run drawn again: `diverged`), and the focus
 * stays where it is. */
function openRun(runId, target, note = null) {
  page.lastRun = runId;
  scope();
  if (page.run && page.run.runId === runId && note === null) {
    page.run.goTo(target);
    return;
  }
  if (page.run) page.run.close();
  const onDiverged = (shown) => openRun(runId, null, diverged(shown));
  const view = new RunView(runId, { onGone: () => page.runs.refresh(), onDiverged, note, target, running: page.running });
  page.run = view;
  page.runs.select(runId);
  const back = el("a", { href: "#/runs", class: "back" }, "← All runs");
  $("run").replaceChildren(back, view.root);
  $("view-runs").classList.add("has-run");
  const title = view.root.querySelector("h2");
  title.tabIndex = -1;
  if (note === null) title.focus({ preventScroll: true });
}

/** What a run drawn again says: the server (killed, then started again) kept less of it
 * than this page had shown. */
function diverged(shown) {
  announce("the server kept less of this run than the page showed; it is shown again as kept");
  return `The server stopped before it kept all of this run (this page had shown ${shown.toLocaleString()} frames): it is shown again as the server kept it, which is what runs show and the downloads have.`;
}

function closeRun() {
  // The focus was in the run (its back link, on a phone): to the run in the list.
  const inRun = $("run").contains(document.activeElement);
  const was = page.run && page.runs.items.get(page.run.runId);
  if (page.run) page.run.close();
  page.run = null;
  page.runs.select(null);
  $("view-runs").classList.remove("has-run");
  $("run").replaceChildren(el("p", { class: "hint" }, "Choose a run to see its frames."));
  if (inRun) (was ? was.link : $("main")).focus();
}

/** The skip link goes to the content without taking the address (`#main` is no view). */
function skipLink() {
  document.querySelector(".skip").addEventListener("click", (event) => {
    event.preventDefault();
    $("main").focus();
  });
}

/** The search box's "this run": which run it means, and whether there is one. */
function scope() {
  const choice = $("scope-run");
  choice.disabled = !page.lastRun;
  choice.parentElement.title = page.lastRun ? `run ${page.lastRun}` : "open a run first";
  if (!page.lastRun && choice.checked) document.querySelector('input[name="scope"][value="all"]').checked = true;
}

function searchForm() {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const q = $("search-q").value;
    const inRun = $("scope-run").checked && page.lastRun;
    location.hash = searchLink(q, inRun ? page.lastRun : null);
  });
}

async function route() {
  const hash = location.hash || "#/runs";
  const [path, query] = hash.slice(2).split("?");
  const parts = path.split("/");
  if (parts[0] === "search") {
    show("search");
    const params = new URLSearchParams(query || "");
    const q = params.get("q") || "";
    $("search-q").value = q;
    if (params.get("run")) {
      page.lastRun = params.get("run");
      scope();
      $("scope-run").checked = true;
    }
    await search($("search-results"), q, params.get("run"));
  } else if (parts[0] === "hooks") {
    show("hooks");
    $("hooks").replaceChildren(el("p", { class: "hint" }, "Loading…"));
    try {
      drawHooks($("hooks"), await fetchHooks());
    } catch (error) {
      $("hooks").replaceChildren(el("p", { class: "message" }, `The hooks could not be read: ${error.message}`));
    }
  } else if (parts[0] === "events") {
    show("events");
  } else {
    show("runs");
    // `#/runs/ID`, or `#/runs/ID@seq`: the run opened at that frame.
    const [id, at] = parts.slice(1).join("/").split("@");
    const seq = /^\d+$/.test(at || "") ? Number(at) : null;
    if (id) openRun(decoded(id), seq);
    else closeRun();
  }
}

/** A run id from the address, `%` escapes read; one that is not a whole escape (`%E0%A4%A`,
 * a link cut short) is taken as it is, so the server says no such run is kept. */
function decoded(id) {
  try {
    return decodeURIComponent(id);
  } catch {
    return id;
  }
}

async function main() {
  skipLink();
  page.runs = new RunsList({ list: $("runs"), count: $("runs-count"), empty: $("runs-empty") });
  page.events = new EventsView($("events"));
  let first;
  try {
    first = await page.runs.refresh();
  } catch {
    first = null;
  }
  if (first && first.status === 401) {
    const wrong = new URLSearchParams(location.search).has("token");
    showLogin(wrong ? "The token in the address is not this server's." : "This server asks for its token, and this browser has not presented it yet.");
    return;
  }
  if (!first || first.status !== 200) {
    link("server unreachable", "lost");
  }
  openEvents();
  searchForm();
  window.addEventListener("hashchange", route);
  await route();
}

main();
