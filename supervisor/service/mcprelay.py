"""The tool servers' prompts and resources, relayed to an MCP client of `mcpx-hooks mcp`
as they are, without hooks: prompts named `<server><separator><prompt>` as tools are,
resources by their own URIs, each listed by the servers that serve them (those whose
`initialize` declared `prompts` or `resources`), in the order the servers are declared; and
the servers' resource templates, a URI no server listed being read from the server whose
template it may stand for (`Relay._templated`); and completions of a prompt's or a resource
template's arguments (`completion/complete`), asked of the server the prompt or template is
from, none from a server that does not declare `completions`.

A server that cannot start is left out of a listing (a `warning` frame in the session's
run says why, and a line on stderr, as for tools), and so is one whose listing's pages do
not end (`mcpclient.every_page`), or is not MCP (`mcpclient.not_mcp`), or that does not
answer within its `callTimeoutMs`; an answer that is not MCP is an error (-32603) naming
the server, not one of the client's params. What a server answers with an error goes to
the client as that error; one that does not answer a `prompts/get` or a `resources/read`
within its `callTimeoutMs` is answered with an error saying so (the request cancelled on
it)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, Final, TypeVar

import pydantic
import trio
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from ..core.errors import HooksError
from ..core.frames import WarningFrame, blank
from ..core.servers import ServerSpec, exposed_name, exposed_targets
from ..run.journal import RunJournal
from ..run.runtime import Runtime
from ..tools.listings import renamed
from ..tools.mcpclient import ServerBroken, every_page, not_mcp
from ..tools.rawasks import ask_as_written
from ..tools.serverentry import ServerEntry, ServerFailing
from .mcplisted import first_of_each, left_out_twice
from .mcpwritten import keep_written, unread


class Unanswered(HooksError):
    """A server a request was for could not be had, or did not answer in time: why."""


logger = logging.getLogger("mcpx_hooks.mcp")
#: How many warnings said `once` a session keeps (then it forgets them all).
SAID_KEPT: Final = 1024
#: How long what a server listed when a URI was looked for stands for its listing, for
#: the next URI looked for: a client reading URIs no server lists, in a loop, has each
#: server listed at most once in that time (`Relay.read_resource`).
LOOK_AGAIN_S: Final = 1.0
#: The JSON-RPC error of a resource no server lists.
RESOURCE_NOT_FOUND: Final = -32002
_T = TypeVar("_T")
_M = TypeVar("_M", bound=pydantic.BaseModel)


class Relay:
    """One session's prompts and resources: where each resource URI was last listed."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.config = runtime.config
        self._resources: dict[str, str] = {}  # uri -> server, from the last listing
        #: Each server's resource templates' fixed beginnings, from their last listing.
        self._templates: list[tuple[str, str]] = []
        self._template_servers: dict[str, str] = {}  # template -> server, the same listing
        self._said: set[str] = set()  # what was said `once` (`_say`)
        #: When each server's listing of a kind was asked for a URI looked for, and what it
        #: answered (`_from_each`'s `looking`).
        self._looked: dict[tuple[str, str], tuple[float, Any]] = {}

    def _say(self, journal: RunJournal, said: str, *, once: bool = False) -> None:
        """A `warning` frame in the session's run and a line on stderr, as the gateway's
        tools' are; `once`: only the first time it is to be said (what a server's listing
        leaves out), not each time (a server that cannot be listed)."""
        if once:
            if said in self._said:
                return
            if len(self._said) >= SAID_KEPT:  # (a server whose names change at will)
                self._said.clear()
            self._said.add(said)
        journal.append(blank(WarningFrame, message=said))
        logger.warning("%s", journal.redactor.text(said))

    @contextlib.asynccontextmanager
    async def _asking(
        self, spec: ServerSpec, *, listing: bool = False
    ) -> AsyncIterator[tuple[ClientSession, ServerEntry]]:
        """The server's session (started if need be) for a request the block makes of it,
        all within its `callTimeoutMs`: `Unanswered` with why when it cannot be had in
        time (the request cancelled on it). For a `listing`, a server known to be failing
        is not waited for (`ServerManager.open`)."""
        manager = self.runtime.servers
        assert manager is not None
        try:
            with trio.fail_after(spec.call_timeout_ms / 1000):
                async with manager.open_session(spec, listing=listing) as opened:
                    yield opened
        except ServerFailing as exc:
            raise Unanswered(str(exc)) from None
        except trio.TooSlowError:
            why = f"server {spec.name} did not answer within its callTimeoutMs"
            raise Unanswered(f"{why} ({spec.call_timeout_ms} ms)") from None

    async def _from_each(
        self,
        kind: str,
        journal: RunJournal,
        ask: Callable[[ClientSession], Awaitable[_T]],
        *,
        looking: bool = False,
    ) -> list[tuple[ServerSpec, _T]]:
        """The listing of `kind` (`prompts`, `resources`, `resource templates`) of each
        server (started if need be) that declared it (`resources` for its templates), in
        declaration order: as listed before in the server's life, else `ask`ed of it now
        (`ServerEntry.listing`). One that cannot start or list is left out, said in a
        `warning` frame in `journal`. `looking` (for a URI no listing holds): asked of it
        now, unless it was so asked within `LOOK_AGAIN_S`, then as it answered that time
        (left out, and nothing said again, when it could not be listed then)."""
        if self.runtime.servers is None:
            return []
        what = "prompts" if kind == "prompts" else "resources"
        specs = list(self.config.servers.values())
        # (each server's: its listing, none, or why it is left out)
        answers: list[tuple[ServerSpec, _T] | str | None] = [None] * len(specs)

        async def from_one(at: int, spec: ServerSpec) -> None:
            looked = self._looked.get((kind, spec.name)) if looking else None
            if looked is not None and trio.current_time() - looked[0] < LOOK_AGAIN_S:
                # (None: it could not be listed then, and that was said then)
                answers[at] = None if looked[1] is None else (spec, looked[1])
                return
            try:
                async with self._asking(spec, listing=True) as (session, entry):
                    declared = getattr(entry.capabilities, what, None)
                    if declared is not None:  # (kept only when it says when it changes)
                        keep = getattr(declared, "list_changed", None) is True
                        if looking:  # (it may have changed a list without saying so)
                            entry.forget_lists((kind,))
                        listed = await entry.listing(kind, partial(ask, session), keep=keep)
                        answers[at] = (spec, listed)
                        if looking:
                            self._looked[kind, spec.name] = (trio.current_time(), listed)
            except (Unanswered, ServerBroken) as exc:
                answers[at] = f"the {kind} of server {spec.name} are not listed: {exc}"
            except pydantic.ValidationError as exc:  # (the others' are listed all the same)
                answers[at] = f"the {kind} of server {spec.name} are not listed: {not_mcp(exc)}"
            except MCPError as exc:  # (not its words: they may hold what it was given)
                why = f"it answered the listing with the JSON-RPC error {exc.error.code}"
                answers[at] = f"the {kind} of server {spec.name} are not listed: {why}"
            if looking and isinstance(answers[at], str):
                self._looked[kind, spec.name] = (trio.current_time(), None)

        async with trio.open_nursery() as nursery:  # (all at once: `mcplisted.open_each`)
            for at, spec in enumerate(specs):
                nursery.start_soon(from_one, at, spec)
        listed = []
        for answer in answers:
            if isinstance(answer, str):
                self._say(journal, answer)
            elif answer is not None:
                listed.append(answer)
        return listed

    async def list_prompts(self, journal: RunJournal) -> types.ListPromptsResult:
        separator = self.config.mcp_separator
        listed = await self._from_each(
            "prompts",
            journal,
            lambda s: every_page("prompts", lambda at: s.list_prompts(params=at)),
        )
        prompts: list[types.Prompt] = []
        seen: set[str] = set()
        for spec, pages in listed:
            named = [p for answer in pages for p in answer.prompts]
            if nameless := sum(not p.name for p in named):  # (no `prompts/get` names it)
                why = f"{nameless} prompt(s) of server {spec.name} without a name: not listed"
                self._say(journal, why, once=True)
            exposed = [
                renamed(p, exposed_name(spec.name, p.name, separator)) for p in named if p.name
            ]
            kept, taken = first_of_each(exposed, lambda p: p.name, seen)
            if taken:  # (a `prompts/get` reaches the first of the name only)
                self._say(journal, left_out_twice("prompts", spec.name, "name", taken), once=True)
            prompts += kept
        return types.ListPromptsResult(prompts=prompts)

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult:
        def ask(
            s: ClientSession, entry: ServerEntry, prompt: str
        ) -> Awaitable[types.GetPromptResult]:
            params = types.GetPromptRequestParams(name=prompt, arguments=arguments)
            request = types.GetPromptRequest(params=params)
            sdk = lambda: s.get_prompt(prompt, arguments)  # noqa: E731
            return _as_written(entry, s, "prompt", request, model=types.GetPromptResult, sdk=sdk)

        return await self._of_prompt(name, ask)

    async def _of_prompt(
        self, name: str, ask: Callable[[ClientSession, ServerEntry, str], Awaitable[_T]]
    ) -> _T:
        """`ask` of the server the exposed prompt `name` is from, with the server's own name
        of it: an error of an unknown prompt where no server that serves prompts has it."""
        manager = self.runtime.servers
        targets = exposed_targets(name, self.config.servers, self.config.mcp_separator)
        for server, prompt in targets:
            if manager is None:
                break
            spec = self.config.servers[server]
            try:
                async with self._asking(spec) as (session, entry):
                    capabilities = entry.capabilities
                    if capabilities is not None and capabilities.prompts is not None:
                        return await ask(session, entry, prompt)
            except Unanswered as exc:
                raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name}")

    async def complete(
        self, params: types.CompleteRequestParams, journal: RunJournal
    ) -> types.CompleteResult:
        """The completions the server of `params.ref` (a prompt, a resource template) gives
        for the argument; none from a server that does not declare `completions`."""
        argument = {"name": params.argument.name, "value": params.argument.value}
        context = params.context.arguments if params.context is not None else None

        async def ask(
            session: ClientSession,
            entry: ServerEntry,
            ref: types.PromptReference | types.ResourceTemplateReference,
        ) -> types.CompleteResult:
            capabilities = entry.capabilities
            if capabilities is None or capabilities.completions is None:
                return types.CompleteResult(completion=types.Completion(values=[]))
            params = types.CompleteRequestParams(
                ref=ref,
                argument=types.CompletionArgument(**argument),
                context=None if context is None else types.CompletionContext(arguments=context),
            )
            request = types.CompleteRequest(params=params)
            sdk = lambda: session.complete(ref, argument, context)  # noqa: E731
            return await _as_written(
                entry, session, "complete", request, model=types.CompleteResult, sdk=sdk
            )

        ref = params.ref
        if isinstance(ref, types.PromptReference):
            named = ref
            return await self._of_prompt(
                ref.name,
                lambda s, e, prompt: ask(s, e, named.model_copy(update={"name": prompt})),
            )
        server = self._template_servers.get(ref.uri)
        if server is None:
            await self.list_resource_templates(journal)
            server = self._template_servers.get(ref.uri)
        if server is None or self.runtime.servers is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown template: {ref.uri}")
        try:
            async with self._asking(self.config.servers[server]) as (session, entry):
                return await ask(session, entry, ref)
        except Unanswered as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None

    async def list_resources(
        self, journal: RunJournal, *, looking: bool = False
    ) -> types.ListResourcesResult:
        listed = await self._from_each(
            "resources",
            journal,
            lambda s: every_page("resources", lambda at: s.list_resources(params=at)),
            looking=looking,
        )
        found: dict[str, str] = {}
        resources: list[types.Resource] = []
        seen: set[str] = set()
        for spec, pages in listed:
            items = [r for answer in pages for r in answer.resources]
            kept, taken = first_of_each(items, lambda r: str(r.uri), seen)
            if taken:  # (a `resources/read` reaches the first server of the URI only)
                self._say(journal, left_out_twice("resources", spec.name, "URI", taken), once=True)
            found.update((str(r.uri), spec.name) for r in kept)
            resources += kept
        self._resources = found
        return types.ListResourcesResult(resources=resources)

    async def list_resource_templates(
        self, journal: RunJournal, *, looking: bool = False
    ) -> types.ListResourceTemplatesResult:
        kind = "resource templates"
        listed = await self._from_each(kind, journal, _templates_of, looking=looking)
        templates: list[tuple[ServerSpec, types.ResourceTemplate]] = []
        seen: set[str] = set()
        for spec, pages in listed:
            items = [t for page in pages for t in page.resource_templates]
            kept, taken = first_of_each(items, lambda t: t.uri_template, seen)
            if taken:
                said = left_out_twice("resource templates", spec.name, "URI template", taken)
                self._say(journal, said, once=True)
            templates += [(spec, t) for t in kept]
        self._templates = [(template_prefix(t.uri_template), spec.name) for spec, t in templates]
        self._template_servers = {t.uri_template: spec.name for spec, t in templates}
        return types.ListResourceTemplatesResult(resource_templates=[t for _, t in templates])

    async def read_resource(self, uri: str, journal: RunJournal) -> types.ReadResourceResult:
        """The resource `uri` of the server that lists it, or whose template it may stand
        for, as last listed; a URI neither holds is looked for in fresh listings of each
        server (a server may list a resource it did not say it added), each server's at most
        once in `LOOK_AGAIN_S`."""
        server = self._resources.get(uri)
        if server is None:  # (a resource listed beats a template's beginning)
            await self.list_resources(journal, looking=True)
            server = self._resources.get(uri) or self._templated(uri)
        if server is None:
            await self.list_resource_templates(journal, looking=True)
            server = self._templated(uri)
        manager = self.runtime.servers
        if server is None or manager is None:
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"Resource not found: {uri}")
        spec = self.config.servers[server]
        try:
            async with self._asking(spec) as (session, entry):
                request = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=uri))
                sdk = lambda: session.read_resource(uri)  # noqa: E731
                return await _as_written(
                    entry, session, "resource", request, model=types.ReadResourceResult, sdk=sdk
                )
        except Unanswered as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None

    def _templated(self, uri: str) -> str | None:
        """The server one of whose resource templates `uri` may stand for, of those last
        listed: the one whose template's fixed beginning is the longest that `uri` starts
        with (the first declared of those as long; None: none). The beginnings, not the
        whole templates: a server checks a URI it is asked for, and a match of a whole
        template costs what no request should."""
        fits = [(len(p), -at, s) for at, (p, s) in enumerate(self._templates) if uri.startswith(p)]
        return max(fits)[2] if fits else None


async def _as_written(
    entry: ServerEntry,
    session: ClientSession,
    kind: str,
    request: pydantic.BaseModel,
    *,
    model: type[_M],
    sdk: Callable[[], Awaitable[_M]],
) -> _M:
    """The server's answer to `request`, read as `model`; kept as the server wrote it for
    the client's answer (`mcpwritten.answer_as_written`) where it was read from its line
    (`rawasks.ask_as_written`)."""
    try:
        result, written = await ask_as_written(entry, session, kind, request, model=model, sdk=sdk)
    except pydantic.ValidationError as exc:  # (not the client's params: -32603, and why)
        said = f"server {entry.spec.name}: {not_mcp(exc)}"
        raise MCPError(code=types.INTERNAL_ERROR, message=said) from None
    if written is not None and keep_written(written):
        return unread(result)
    return result


async def _templates_of(session: ClientSession) -> list[types.ListResourceTemplatesResult]:
    """A server's resource templates, every page; none from a server that serves resources
    but not templates (it answers the listing with "method not found")."""
    try:
        return await every_page(
            "resource templates", lambda at: session.list_resource_templates(params=at)
        )
    except MCPError as exc:
        if exc.error.code != types.METHOD_NOT_FOUND:
            raise
        return []


def template_prefix(template: str) -> str:
    """The fixed beginning of a URI template (RFC 6570): what every URI it expands to starts
    with, up to its first expression."""
    return template.split("{", 1)[0]
