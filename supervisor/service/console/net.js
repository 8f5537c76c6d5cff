// The page's ways to the server: JSON over HTTP, and WebSockets that come back by themselves.
// Every request goes to this page's own origin; the browser adds the console's cookie.

/** GET a JSON document; `{status, body}` (body null when it is not JSON). */
export async function getJson(path) {
  const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  return { status: response.status, body };
}

/** The WebSocket address of a path on this page's own origin. */
export function socketUrl(path) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${path}`;
}

/** Each JSON object in one message from the server (one per line). A line that is not JSON
 * is reported as an object of type "unreadable", never thrown. */
export function* objects(text) {
  for (const line of String(text).split("\n")) {
    if (!line) continue;
    try {
      yield JSON.parse(line);
    } catch {
      yield { type: "unreadable", text: line.slice(0, 200) };
    }
  }
}

/** Waits between reconnection attempts: 250 ms, doubling, at most 4 s. */
export class Backoff {
  constructor() {
    this.delay = 250;
  }
  next() {
    const delay = this.delay;
    this.delay = Math.min(this.delay * 2, 4000);
    return delay;
  }
  reset() {
    this.delay = 250;
  }
}

/**
 * One WebSocket to `path()` (called again at each attempt, so it may resume), reopened after
 * a close the server did not mean as the end (`done(code)` says which closes end it).
 * `onObject(obj)` gets every object of every message in order; `onState(state, detail)`
 * hears "open", "lost" and "ended". `close()` stops it for good.
 */
export class Socket {
  constructor({ path, onObject, onState = () => {}, done = (code) => code === 1000 }) {
    this.path = path;
    this.onObject = onObject;
    this.onState = onState;
    this.done = done;
    this.backoff = new Backoff();
    this.closed = false;
    this.ws = null;
    this.timer = null;
    this.open();
  }

  open() {
    if (this.closed) return;
    const ws = new WebSocket(socketUrl(this.path()));
    this.ws = ws;
    ws.onopen = () => {
      this.backoff.reset();
      this.onState("open");
    };
    ws.onmessage = (event) => {
      for (const obj of objects(event.data)) this.onObject(obj);
    };
    ws.onclose = (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closed) return;
      if (this.done(event.code)) {
        this.closed = true;
        this.onState("ended", event);
        return;
      }
      this.onState("lost", event);
      this.timer = setTimeout(() => this.open(), this.backoff.next());
    };
  }

  /** Sends one JSON object; false when the socket is not open. */
  send(obj) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(obj));
    return true;
  }

  get isOpen() {
    return Boolean(this.ws && this.ws.readyState === WebSocket.OPEN);
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.close(1000);
    }
  }
}
