// The hooks in force, where each was declared, the files applied and the project files not
// applied (not trusted yet), from `/v1/hooks`.

import { el } from "./dom.js";
import { objects, socketUrl } from "./net.js";
import { ServiceMessage } from "./tables.js";

/** Asks `/v1/hooks` once; resolves with its message, or rejects saying why. */
export function fetchHooks() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(socketUrl("/v1/hooks"));
    let message = null;
    ws.onmessage = (event) => {
      for (const obj of objects(event.data)) if (obj.type === ServiceMessage.HOOKS) message = obj;
        else if (obj.type === ServiceMessage.ERROR) reject(new Error(obj.message));
    };
    ws.onclose = () => (message ? resolve(message) : reject(new Error("the server closed the socket")));
    ws.onerror = () => {};
  });
}

function source(hook) {
  const s = hook.source || {};
  if (s.file) return `${s.file}${s.index !== undefined ? `:/hooks/${s.index}` : ""}`;
  return s.kind ? `${s.kind}${s.index !== undefined ? ` [${s.index}]` : ""}` : "—";
}

/** What a hook runs and with what settings, as the server resolved them. */
function detail(hook) {
  const skip = new Set(["name", "on", "phase", "action", "effect", "failure", "sandbox", "enabled", "source"]);
  const rest = Object.fromEntries(Object.entries(hook).filter(([k]) => !skip.has(k)));
  return JSON.stringify(rest, null, 2);
}

export function drawHooks(root, message) {
  const hooks = message.hooks || [];
  const rows = hooks.map((h) =>
    el(
      "tr",
      { class: h.enabled === false ? "disabled" : "" },
      el("th", { scope: "row" }, el("details", {}, el("summary", {}, h.name), el("pre", { class: "hook-detail" }, detail(h)))),
      el("td", {}, `${h.on}.${h.phase}`),
      el("td", {}, h.action),
      el("td", {}, h.effect),
      el("td", {}, h.failure || "open"),
      el("td", {}, h.sandbox || ""),
      el("td", {}, h.enabled === false ? "no" : "yes"),
      el("td", { class: "src" }, el("code", {}, source(h))),
    ),
  );
  const table = hooks.length
    ? el(
        "div",
        { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Hooks table" },
        el(
          "table",
          { class: "hooks" },
          el("caption", {}, `${hooks.length} hook(s), in declaration order`),
          el("thead", {}, el("tr", {}, ...["name", "point.phase", "action", "effect", "failure", "sandbox", "enabled", "declared in"].map((t) => el("th", { scope: "col" }, t)))),
          el("tbody", {}, ...rows),
        ),
      )
    : el("p", { class: "hint" }, "No hook is in force.");
  const files = message.files || [];
  const skipped = message.skipped || [];
  const trusted = message.projectFiles || [];
  root.replaceChildren(
    table,
    el("h3", {}, "Config files applied"),
    files.length ? el("ol", { class: "files" }, ...files.map((f) => el("li", {}, el("code", {}, f)))) : el("p", { class: "hint" }, "None."),
    el("h3", {}, "Project files not applied"),
    skipped.length
      ? el(
          "ul",
          { class: "skipped" },
          ...skipped.map((s) => el("li", {}, el("code", {}, s.file), ` — ${s.reason}. To apply it: `, el("code", {}, s.trustCommand))),
        )
      : el("p", { class: "hint" }, trusted.length ? "None: every project file found is trusted." : "None: no project file (.mcpx-hooks.toml or .mcpx-hooks.json) was found."),
  );
}
