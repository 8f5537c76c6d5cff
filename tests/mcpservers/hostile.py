"""A hostile MCP tool server over stdio, standard library only, for the tests.

`hostile.py MODE [LOG]`: LOG (a file) gets one line per start ("start"), per call of `wait`
("waiting ID"; a FIFO `LOG.waiting`, if there is one, gets a byte) and per
`notifications/cancelled` ("cancelled ID"). Modes:

- `good`: answers like a well-behaved server; tool `echo` answers its arguments as
  structured content, `wait` never answers (until cancelled; with `"deaf": true` it reads
  nothing more either, as a server stuck in a call: its stdin fills), `fail` answers `isError`,
  `big` answers `{"bytes": N}` with a text of N bytes, written as it goes (with `"idLast":
  true` its `id` ends the line, as the TypeScript SDK writes it).
- `mute`: reads, never answers `initialize` (a start that never ends).
- `die-at-start`: exits 3 before answering, after writing to stderr.
- `crash-on-call`: answers the handshake, exits 7 on the first tool call.
- `lying`: lists its tools, and answers every call to them with a JSON-RPC error.
- `refuse`: answers `initialize` with a JSON-RPC error of code -32000 (the code the SDK's
  client also uses for a connection that ended).
- `paged`: as `good`, with one prompt and one resource more, each listing (tools, prompts,
  resources) one item a page, MCP's `nextCursor` leading to the next; no resource templates
  (their listing is "method not found", as from a server that has none).
- `endless`: as `paged`, but every page of a listing has a next one (the item repeated).
- `deaf`: as `good`, but never answers a request about its prompts or its resources.
- `drift`: as `good`, with one tool more, `grow`: a call of it adds the tool `extra`, says
  so (`notifications/tools/list_changed`), and is answered once the tools were listed again.
- `eager`: as `good`, but says its tools changed (`notifications/tools/list_changed`) before
  it answers `initialize`, and again when told `notifications/initialized`, before any
  listing: the reference "everything" server does one or the other.
- `odd`: as `good`, but each item of its listings (tools, prompts, resources, templates)
  is written as no SDK's model writes it: its keys in an order of their own, a key of its
  own, `_meta` contents, a number where the model's field is a float (`ODD_LISTINGS`).
- `malformed`: as `good`, but its prompts listing holds a prompt without a name, and its
  answer to `prompts/get` no messages.
- `schemaless`: as `good`, but one of its tools has no `inputSchema`.
- `unlisting`: as `good`, but it answers each listing of its prompts, its resources and
  its resource templates with a JSON-RPC error (-32603).
- `twice`: as `good`, but its tools listing ends with `echo` again (described) and a tool
  whose name is empty, its prompts listing with `greet` again and a prompt whose name is
  empty, and its resources and templates listings with their first again (described).
- `flood`: answers the handshake, then floods stdout with lines that are not JSON-RPC.
- `garbled`: answers every call with a result that is not a tool result.
- `nan`: answers every call with structured content holding NaN (not JSON).
- `leak`: answers every call with `isError` and the value of `$MCPX_TEST_TOKEN` (a secret
  it was given), which it also writes on stderr; its version (at `initialize`) and each of
  its tools' descriptions hold it too.
- `relay`: as `good`, with one tool more, `relay`, which writes what its caller asks: each of
  `lines` as a line of its own (each character a byte, so that any bytes can be asked for),
  then the call's answer with `error` as its error if given, else with `result` as its
  result, whatever they are; or, given `raw`, that line as its answer (each character a
  byte), `@id` in it standing for the call's `id` as JSON.

Tool `whoami` (in `good` and `relay`) answers the `id` its call came with, as JSON; tool
`meta`, `{"id", "meta"}`: that id and the request's `_meta`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "wait", "inputSchema": {"type": "object"}},
    {"name": "fail", "inputSchema": {"type": "object"}},
    {"name": "rm", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": True}},
    {"name": "big", "inputSchema": {"type": "object"}},
    {
        "name": "mixed",
        "title": "Every kind of content",
        "description": "Answers a content item of every type.",
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        "_meta": {"example.org/kind": "test"},
    },
]
TOOLS.append({"name": "progress", "inputSchema": {"type": "object"}})
TOOLS.append({"name": "whoami", "inputSchema": {"type": "object"}})
TOOLS.append({"name": "meta", "inputSchema": {"type": "object"}})
RELAY = {"name": "relay", "inputSchema": {"type": "object"}}
GROW = {"name": "grow", "inputSchema": {"type": "object"}}
EXTRA = {"name": "extra", "inputSchema": {"type": "object"}}
#: What `good` serves besides its tools (its prompts, its resources).
PROMPTS = [{"name": "greet", "description": "Greets", "arguments": [{"name": "who"}]}]
RESOURCES = [{"uri": "file:///h/notes.txt", "name": "notes", "mimeType": "text/plain"}]
TEMPLATES = [{"uriTemplate": "file:///h/notes/{name}", "name": "a note", "mimeType": "text/plain"}]
#: What `good` completes: (prompt name or template, argument) -> the values, a value given
#: being the start of each.
COMPLETIONS = {
    ("greet", "who"): ["Ada", "Alan", "Grace"],
    ("file:///h/notes/{name}", "name"): ["today", "tomorrow"],
}
#: What `odd` lists, by listing: `good`'s items, written oddly.
#: (Its rank, a key no model knows, is `$HOSTILE_RANK` when that is set.)
RANK = int(os.environ.get("HOSTILE_RANK", "1"))
ODD_ITEM = {"example.org/rank": RANK, "_meta": {"example.org/origin": {"n": 2, "sure": 0.5}}}
ODD_LISTINGS: dict[str, list[Any]] = {
    "tools": [
        {"inputSchema": {"type": "object", "required": [], "properties": {}}, "name": "echo"}
        | ODD_ITEM,
        *TOOLS[1:],
    ],
    "prompts": [
        {"arguments": [{"required": False, "name": "who", "x-hint": "a name"}], "name": "greet"}
        | ODD_ITEM
    ],
    "resources": [
        {"name": "notes", "size": 9, "annotations": {"priority": 1}, "uri": RESOURCES[0]["uri"]}
        | ODD_ITEM
    ],
    "resourceTemplates": [
        {"mimeType": "text/plain", "uriTemplate": "file:///h/notes/{name}", "name": "a note"}
        | ODD_ITEM
    ],
}
#: What `paged` serves besides.
MORE_PROMPTS = [{"name": "part", "description": "Stands on a page of its own"}]
MORE_RESOURCES = [{"uri": "file:///h/more.txt", "name": "more", "mimeType": "text/plain"}]
#: What `mixed` answers: a content item of every type, structured content and `_meta`.
MIXED = {
    "content": [
        {"type": "text", "text": "plain", "annotations": {"audience": ["user"], "priority": 0.5}},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "resource_link", "uri": "file:///tmp/a.txt", "name": "a.txt"},
        {
            "type": "resource",
            "resource": {"uri": "file:///tmp/b.txt", "mimeType": "text/plain", "text": "bee"},
        },
    ],
    "isError": False,
    "_meta": {"example.org/trace": "abc"},
}


#: What the `progress` tool says when asked to be `odd`: a progress of `0` (an integer, as
#: a server writes it), and a key of its own in each notification's params. (Its prompt,
#: its resource and its completions have such a key too, their keys in an order of their
#: own, and a `priority` of `1`.)
ODD_STEPS = ((0, "none yet"), (2, "all"))
ODD = {"example.org/eta": {"seconds": 0, "sure": 0.5}}


TEMPLATES_LIST = "resources/templates/list"
#: The modes that serve prompts and resources.
SERVING = ("good", "relay", "paged", "endless", "deaf", "odd", "malformed", "twice", "unlisting")


def send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def send_big(rid: Any, size: int, id_last: bool) -> None:
    """An answer whose text is `size` bytes, never held whole."""
    rid_json = json.dumps(rid)
    start = '{"result": {"content": [{"type": "text", "text": "'
    if not id_last:
        start = f'{{"jsonrpc": "2.0", "id": {rid_json}, ' + start[1:]
    sys.stdout.write(start)
    piece = "x" * (1024 * 1024)
    while size > 0:
        sys.stdout.write(piece[:size])
        size -= len(piece)
    sys.stdout.write(
        '"}]}' + (f', "jsonrpc": "2.0", "id": {rid_json}}}' if id_last else "}") + "\n"
    )
    sys.stdout.flush()


def listing(mode: str, key: str, items: list[Any], params: dict[str, Any]) -> dict[str, Any]:
    """A listing's answer: all of `items` at once, or (`paged`, `endless`) one a page."""
    items = ODD_LISTINGS[key] if mode == "odd" else items
    if mode not in ("paged", "endless"):
        return {key: items}
    at = int(params.get("cursor") or 0)
    result: dict[str, Any] = {key: items[at % len(items) : at % len(items) + 1]}
    if mode == "endless" or at + 1 < len(items):
        result["nextCursor"] = str(at + 1)
    return result


def log(line: str) -> None:
    if len(sys.argv) > 2:
        with open(sys.argv[2], "a") as f:
            f.write(line + "\n")


def say_waiting(rid: Any) -> None:
    log(f"waiting {rid}")
    if len(sys.argv) > 2:
        try:
            said = os.open(sys.argv[2] + ".waiting", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return  # no FIFO, or nobody reading it
        os.write(said, b"w")
        os.close(said)


def main() -> None:
    mode = sys.argv[1]
    grown = False  # (`drift`: whether `extra` is among its tools)
    growing: list[Any] = []  # (`drift`: the calls of `grow` to answer once listed again)
    log("start")
    if mode == "die-at-start":
        sys.stderr.write("hostile: cannot start today\n")
        sys.exit(3)
    for line in sys.stdin:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        params = msg.get("params") or {}
        if mode == "mute":
            continue
        if method == "initialize" and mode == "refuse":
            error = {"code": -32000, "message": "not ready: the database is down"}
            send({"jsonrpc": "2.0", "id": rid, "error": error})
        elif method == "initialize":
            info = {"name": "hostile", "version": mode}
            if mode == "leak":
                info["version"] = f"leak {os.environ.get('MCPX_TEST_TOKEN', '')}"
            version = params.get("protocolVersion")
            capabilities: dict[str, Any] = {"tools": {}}
            if mode in SERVING:
                capabilities.update(prompts={}, resources={})
            if mode == "good":
                capabilities.update(completions={})
            result = {"protocolVersion": version, "capabilities": capabilities, "serverInfo": info}
            if mode == "eager":
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif mode == "deaf" and str(method).startswith(("prompts/", "resources/")):
            continue
        elif mode == "unlisting" and method in ("prompts/list", "resources/list", TEMPLATES_LIST):
            error = {"code": -32603, "message": "the index is being rebuilt"}
            send({"jsonrpc": "2.0", "id": rid, "error": error})
        elif method == "prompts/list":
            prompts = [*PROMPTS, *MORE_PROMPTS] if mode == "paged" else PROMPTS
            prompts = [*prompts, {"description": "nameless"}] if mode == "malformed" else prompts
            again = {**PROMPTS[0], "description": "again"}
            prompts = [*prompts, again, {"name": ""}] if mode == "twice" else prompts
            send({"jsonrpc": "2.0", "id": rid, "result": listing(mode, "prompts", prompts, params)})
        elif method == "prompts/get":
            who = (params.get("arguments") or {}).get("who", "you")
            text = {"text": f"Hello, {who}", "type": "text", "annotations": {"priority": 1}}
            messages = [{"content": text, "role": "user"}]
            said = {"messages": messages, "description": "greets", **ODD}
            if mode == "malformed":
                said = {"description": "greets, but says nothing"}
            send({"jsonrpc": "2.0", "id": rid, "result": said})
        elif method == "completion/complete":  # (what `COMPLETIONS` says)
            ref, argument = params.get("ref") or {}, params.get("argument") or {}
            key = (ref.get("name") or ref.get("uri"), argument.get("name"))
            values = [v for v in COMPLETIONS.get(key, []) if v.startswith(argument.get("value"))]
            completion = {"total": len(values), "values": values, **ODD}
            send({"jsonrpc": "2.0", "id": rid, "result": {"completion": completion, **ODD}})
        elif method == "resources/list":
            listed = [*RESOURCES, *MORE_RESOURCES] if mode == "paged" else RESOURCES
            listed = (
                [*listed, {**RESOURCES[0], "description": "again"}] if mode == "twice" else listed
            )
            answer = listing(mode, "resources", listed, params)
            send({"jsonrpc": "2.0", "id": rid, "result": answer})
        elif method == "resources/templates/list" and mode == "paged":  # (it lists none)
            error = {"code": -32601, "message": "Method not found"}
            send({"jsonrpc": "2.0", "id": rid, "error": error})
        elif method == "resources/templates/list":
            again = [*TEMPLATES, {**TEMPLATES[0], "description": "again"}]
            answer = listing(
                mode, "resourceTemplates", again if mode == "twice" else TEMPLATES, params
            )
            send({"jsonrpc": "2.0", "id": rid, "result": answer})
        elif method == "resources/read":
            uri = params.get("uri")
            if uri == RESOURCES[0]["uri"]:
                said = {"text": "the notes", "uri": uri, "annotations": {"priority": 1}, **ODD}
                send({"jsonrpc": "2.0", "id": rid, "result": {"contents": [said], **ODD}})
            elif str(uri).startswith("file:///h/notes/"):  # (what `TEMPLATES` stands for)
                text = f"note {str(uri).rsplit('/', 1)[-1]}"
                contents = [{"uri": uri, "mimeType": "text/plain", "text": text}]
                send({"jsonrpc": "2.0", "id": rid, "result": {"contents": contents}})
            else:
                error = {"code": -32002, "message": f"no resource {uri}"}
                send({"jsonrpc": "2.0", "id": rid, "error": error})
        elif method == "tools/list":
            tools = [*TOOLS, RELAY] if mode == "relay" else TOOLS
            if mode == "schemaless":
                tools = [*TOOLS, {"name": "loose"}]
            if mode == "twice":
                again = {
                    "name": "echo",
                    "description": "another",
                    "inputSchema": {"type": "object"},
                }
                tools = [*TOOLS, again, {"name": "", "inputSchema": {"type": "object"}}]
            if mode == "drift":
                tools = [*TOOLS, GROW, *([EXTRA] if grown else [])]
            if mode == "leak":
                said = f"uses {os.environ.get('MCPX_TEST_TOKEN', '')}"
                tools = [{**tool, "description": said} for tool in TOOLS]
            send({"jsonrpc": "2.0", "id": rid, "result": listing(mode, "tools", tools, params)})
            for grew in growing:
                send({"jsonrpc": "2.0", "id": grew, "result": {"content": []}})
            growing.clear()
            if mode == "flood":
                for _ in range(100_000):
                    sys.stdout.write("this is not JSON-RPC at all\n")
                sys.stdout.flush()
        elif method == "notifications/initialized" and mode == "eager":
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif method == "notifications/cancelled":
            log(f"cancelled {params.get('requestId')}")
        elif method == "tools/call":
            if mode == "crash-on-call":
                sys.exit(7)
            if mode == "nan":
                sys.stdout.write(
                    f'{{"jsonrpc": "2.0", "id": {json.dumps(rid)}, "result": {{"content": [],'
                    ' "structuredContent": {"x": NaN}}}\n'
                )
                sys.stdout.flush()
                continue
            if mode == "garbled":
                bad = {"content": "not a list", "isError": "maybe"}
                send({"jsonrpc": "2.0", "id": rid, "result": bad})
                continue
            if mode == "leak":
                token = os.environ.get("MCPX_TEST_TOKEN", "")
                if params.get("name") == "fail":  # a JSON-RPC error holding its secret
                    error = {"code": -32000, "message": f"bad {token}"}
                    send({"jsonrpc": "2.0", "id": rid, "error": error})
                    continue
                sys.stderr.write(f"token {token}\n")
                result = {"content": [{"type": "text", "text": f"no: {token}"}], "isError": True}
                send({"jsonrpc": "2.0", "id": rid, "result": result})
                continue
            if mode == "lying":
                error = {"code": -32602, "message": "I lied: there is no such tool"}
                send({"jsonrpc": "2.0", "id": rid, "error": error})
                continue
            name, args = params.get("name"), params.get("arguments") or {}
            if name == "wait":
                say_waiting(rid)
                if args.get("deaf"):
                    time.sleep(3600)
                continue  # never answered
            if name == "big":
                send_big(rid, int(args.get("bytes", 0)), bool(args.get("idLast")))
                continue
            if name == "progress":
                token = (params.get("_meta") or {}).get("progressToken")
                steps = ODD_STEPS if args.get("odd") else ((1, "one"), (2, "two"))
                for step, said in steps:
                    if token is not None:
                        progress = {"progressToken": token, "progress": step, "total": 2}
                        if args.get("odd"):  # (its own key, the token not first)
                            progress = {"progress": step, "progressToken": token, **ODD}
                        send(
                            {
                                "jsonrpc": "2.0",
                                "method": "notifications/progress",
                                "params": {**progress, "message": said},
                            }
                        )
                said = {"level": "warning", "logger": "hostile", "data": {"step": 2}}
                if args.get("odd"):
                    said = {"data": {"step": 0, "of": 2.0}, "level": "warning", **ODD}
                send({"jsonrpc": "2.0", "method": "notifications/message", "params": said})
                content = [{"type": "text", "text": "done"}]
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": content}})
                continue
            if name == "relay":
                sys.stdout.flush()
                for raw in args.get("lines", []):
                    written = str(raw).replace("\n", " ").encode("latin-1", "replace")
                    sys.stdout.buffer.write(written + b"\n")
                if "raw" in args:
                    given = str(args["raw"]).replace("@id", json.dumps(rid))
                    sys.stdout.buffer.write(given.encode("latin-1") + b"\n")
                    sys.stdout.flush()
                    continue
                answer = (
                    {"error": args["error"]} if "error" in args else {"result": args.get("result")}
                )
                send({"jsonrpc": "2.0", "id": rid, **answer})
                continue
            if name == "grow" and mode == "drift":
                grown = True
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                growing.append(rid)  # answered when the tools are listed again
                continue
            if name == "meta":  # the id and the `_meta` the call came with, as JSON
                seen = {"id": rid, "meta": params.get("_meta")}
                content = [{"type": "text", "text": json.dumps(seen)}]
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": content}})
                continue
            if name == "whoami":  # the id the call came with, as JSON
                content = [{"type": "text", "text": json.dumps(rid)}]
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": content}})
                continue
            if name == "mixed":
                result = {**MIXED, "structuredContent": {"n": args.get("n", 0)}}
                send({"jsonrpc": "2.0", "id": rid, "result": result})
                continue
            content = [{"type": "text", "text": json.dumps(args)}]
            result = {"content": content, "structuredContent": args, "isError": name == "fail"}
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "result": {}})


if __name__ == "__main__":
    main()
