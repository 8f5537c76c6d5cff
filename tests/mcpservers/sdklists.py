"""An MCP server built with the official SDK's low-level `Server`, over stdio, whose prompts,
resources and resource templates are listed in `PAGES` pages each, and change when asked.

    python sdklists.py LOG [MARKER] [--unsaid]

LOG (a file) gets a line per listing request it answers (`prompts/list`, `resources/list`,
`resources/templates/list`, each page). Tool `change` renames the last prompt, resource
and template (`changed`), and says so (`notifications/prompts/list_changed`,
`notifications/resources/list_changed`) before it answers; tool `quietly` has another first
resource, `file:///r/quiet`, and says nothing. Each resource listed reads `read`. With
`--unsaid` it declares no `listChanged` (its lists may change without a word).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

LOG = sys.argv[1]
#: How many pages each listing has (one item a page).
PAGES = 16
PROMPTS = [types.Prompt(name=f"p{n}") for n in range(PAGES)]
RESOURCES = [types.Resource(uri=f"file:///r/{n}", name=f"r{n}") for n in range(PAGES)]
TEMPLATES = [
    types.ResourceTemplate(uri_template=f"file:///t{n}/{{x}}", name=f"t{n}") for n in range(PAGES)
]


def page(method: str, items: list[Any], params: types.PaginatedRequestParams | None) -> Any:
    """The page of `items` the cursor names (one item), and the cursor of the next."""
    with open(LOG, "a") as log:
        log.write(method + "\n")
    at = int(params.cursor) if params is not None and params.cursor else 0
    return items[at : at + 1], (str(at + 1) if at + 1 < len(items) else None)


async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
    items, after = page("prompts/list", PROMPTS, params)
    return types.ListPromptsResult(prompts=items, next_cursor=after)


async def list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
    items, after = page("resources/list", RESOURCES, params)
    return types.ListResourcesResult(resources=items, next_cursor=after)


async def list_templates(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
    items, after = page("resources/templates/list", TEMPLATES, params)
    return types.ListResourceTemplatesResult(resource_templates=items, next_cursor=after)


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
    schema = {"type": "object"}
    tools = [types.Tool(name=name, input_schema=schema) for name in ("change", "quietly")]
    return types.ListToolsResult(tools=tools)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
    if params.name == "quietly":  # (the first resource, another, unsaid)
        RESOURCES[0] = types.Resource(uri="file:///r/quiet", name="quiet")
        return types.CallToolResult(content=[types.TextContent(type="text", text="added")])
    PROMPTS[-1] = types.Prompt(name="changed")
    RESOURCES[-1] = types.Resource(uri="file:///r/changed", name="changed")
    TEMPLATES[-1] = types.ResourceTemplate(uri_template="file:///changed/{x}", name="changed")
    await ctx.session.send_prompt_list_changed()
    await ctx.session.send_resource_list_changed()
    return types.CallToolResult(content=[types.TextContent(type="text", text="changed")])


async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> Any:
    listed = [str(r.uri) for r in RESOURCES]
    if str(params.uri) not in listed:
        raise MCPError(code=-32002, message=f"no resource {params.uri}")
    contents = [types.TextResourceContents(uri=str(params.uri), text="read")]
    return types.ReadResourceResult(contents=contents)


server: Server[Any] = Server(
    "sdklists",
    on_list_prompts=list_prompts,
    on_list_resources=list_resources,
    on_list_resource_templates=list_templates,
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_read_resource=read_resource,
)


async def main() -> None:
    says = "--unsaid" not in sys.argv
    told = NotificationOptions(prompts_changed=says, resources_changed=says)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(told))


if __name__ == "__main__":
    anyio.run(main)
