"""``FreshCache.get_prompt`` and ``FreshCache.complete``: requests whose result is
computed, passed through.

A prompt is built from its arguments each time it is asked for (``prompts/get``), and
so are an argument's completions (``completion/complete``): there is no text to keep
fresh, so their answers are never cached, only passed through the source
(`Source.forward`) under one deadline, with the change hints an answer carried heard on
the way (invariant 9): `Prompts._pass`, the one sender of both. Sending under a
deadline is `send_once`, the same rule `FreshCache.call_tool` sends by;
``input_required`` (basic/patterns/mrtr) is `continuation`, read the same way for
prompts and tools.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio

from .._core import RequestFailed
from .._core._frozen import frozen, frozen_mapping
from .._errors import ConfigurationError, FreshCacheError, MethodNotFoundError
from .._protocol._reissue import may_reissue
from .._protocol._tools import ToolReply, input_required, plain, tool_call_params
from .._sources._source import cannot_forward
from ._setup import checked_deadline

if TYPE_CHECKING:
    from .._core import StreamEvent
    from .._sources._source import ServerInfo, Source

T = TypeVar("T")

PromptState = Literal["answered", "input_required", "denied", "not_found", "unavailable"]
CompletionState = Literal["answered", "denied", "not_found", "unavailable"]


@dataclass(frozen=True, slots=True)
class PromptResult:
    """What one `FreshCache.get_prompt` came to.

    ``answered``: the server's ``GetPromptResult`` is in ``result`` (read-only).
    ``input_required``: the server needs input first (``input_requests``,
    ``request_state``: ask again with ``request_state=...`` and ``input_responses=...``).
    ``denied``: the server refused this principal. ``not_found``: the server refused the
    params (``-32602``: no such prompt, a missing argument); ``detail`` is its message.
    ``unavailable``: no result; ``reason`` says why (``unreachable``, ``timeout``,
    ``server_error``, the server's message in ``detail``).
    """

    name: str
    state: PromptState
    result: Mapping[str, Any] | None = None
    reason: str | None = None
    input_requests: Mapping[str, Any] | None = None
    request_state: str | None = None
    detail: str | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.state == "answered"


@dataclass(frozen=True, slots=True)
class CompletionResult:
    """What one `FreshCache.complete` came to.

    ``answered``: the server's ``CompleteResult`` is in ``result`` (read-only: its
    ``completion`` with ``values``). ``denied``: the server refused this principal.
    ``not_found``: the server refused the params (``-32602``: no such prompt or
    template, no such argument); ``detail`` is its message. ``unavailable``: no
    result; ``reason`` says why (``unreachable``, ``timeout``, ``server_error``).
    """

    ref: Mapping[str, Any]
    state: CompletionState
    result: Mapping[str, Any] | None = None
    reason: str | None = None
    detail: str | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.state == "answered"

    @property
    def values(self) -> tuple[str, ...]:
        """The completion values (none unless ``answered``)."""
        completion = (self.result or {}).get("completion") or {}
        return tuple(completion.get("values") or ())


def continuation(result: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str | None] | str:
    """An ``input_required`` result's ``(inputRequests, requestState)``, or why it is
    unusable (the spec wants at least one of them, of the right types)."""
    asked, state = result.get("inputRequests"), result.get("requestState")
    if (
        not isinstance(asked, Mapping | None)
        or not isinstance(state, str | None)
        or (asked is None and state is None)
    ):
        return "an input_required result without inputRequests or requestState"
    return frozen_mapping(asked), state


def check_continuation(request_state: object, input_responses: object) -> None:
    """A continuation's ``request_state`` is the server's string, ``input_responses`` a
    mapping (basic/patterns/mrtr)."""
    if request_state is not None and not isinstance(request_state, str):
        raise ConfigurationError(
            f"a continuation takes request_state as the server's string, got {request_state!r}"
        )
    if input_responses is not None and not isinstance(input_responses, Mapping):
        raise ConfigurationError(
            f"a continuation takes input_responses as a mapping or None, got {input_responses!r}"
        )


async def send_once(
    method: str, label: str, send: Callable[[], Awaitable[T]], end: float, owner: object
) -> T | RequestFailed:
    """``send()``, by ``end``: cut off by the deadline, its answer is lost; a source's
    own exception is an explicit failure, not a raise (``owner``: whose it was)."""
    outcome: T | RequestFailed | None = None
    with anyio.move_on_after(max(0.0, end - anyio.current_time())):
        try:
            outcome = await send()
        except FreshCacheError:
            raise
        except Exception as exc:  # a source's own bug: an explicit state, not a raise
            outcome = RequestFailed("server_error", f"{type(owner).__name__}: {exc!r}", lost=True)
    if outcome is None:
        detail = f"{label} got no answer within the call's timeout"
        if not may_reissue(method):
            detail += "; it may have run"
        return RequestFailed("timeout", detail, lost=True)
    return outcome


class Prompts:
    """`FreshCache.get_prompt` (a mixin: the cache provides what is declared here)."""

    source: Source
    principal: str | None
    read_timeout: float
    server_info: ServerInfo | None
    _discovered: anyio.Event

    if TYPE_CHECKING:

        def _feed_hints(self, hints: tuple[StreamEvent, ...]) -> None: ...

    async def discovered(self) -> ServerInfo | None:
        """`server_info` once the first discovery settled (waiting for it, as a read
        does; bound it with a cancel scope), ``None`` when the server gave no answer:
        whether to ask it for what it may not offer (`complete`)."""
        await self._discovered.wait()
        return self.server_info

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        principal: str | None = None,
        request_state: str | None = None,
        input_responses: Mapping[str, Any] | None = None,
    ) -> PromptResult:
        """Prompt ``name`` built from ``arguments`` by the server now (``prompts/get``,
        never cached: see the module docstring). ``timeout`` bounds it. A server
        without ``prompts/get`` raises `MethodNotFoundError`, as for its catalogs."""
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"get_prompt() takes a prompt name, got {name!r}")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise ConfigurationError(
                f"get_prompt() takes arguments as a mapping or None, got {arguments!r}"
            )
        check_continuation(request_state, input_responses)
        params = tool_call_params(  # the same shape: name, arguments, a continuation's fields
            name, arguments, request_state=request_state, input_responses=input_responses
        )
        outcome = await self._pass("prompts/get", repr(name), params, timeout, principal)
        return _judged(name, outcome)

    async def complete(
        self,
        ref: Mapping[str, Any],
        argument: Mapping[str, Any],
        context: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> CompletionResult:
        """Completions of ``argument`` (``{"name", "value"}``) of the prompt or resource
        template ``ref`` names (``{"type": "ref/prompt", "name"}`` or ``{"type":
        "ref/resource", "uri"}``), ``context`` the arguments already given
        (``{"arguments": {...}}``): ``completion/complete``, asked of the server now,
        never cached (see the module docstring). ``timeout`` bounds it. A server that
        declares no ``completions`` capability, or answers ``-32601``, raises
        `MethodNotFoundError` (nothing is sent to one that declared none)."""
        for what, value in (("ref", ref), ("argument", argument)):
            if not isinstance(value, Mapping):
                raise ConfigurationError(f"complete() takes {what} as a mapping, got {value!r}")
        if context is not None and not isinstance(context, Mapping):
            raise ConfigurationError(
                f"complete() takes context as a mapping or None, got {context!r}"
            )
        budget = checked_deadline(timeout, self.read_timeout)
        end = anyio.current_time() + budget
        with anyio.move_on_after(budget):
            await self.discovered()  # what the server declared decides whether to ask it
        if not offers_completions(self.server_info):
            raise MethodNotFoundError(
                f"{self.source.identity} declares no completions capability: "
                "completion/complete is not sent to it"
            )
        params: dict[str, Any] = {"ref": plain(ref), "argument": plain(argument)}
        if context is not None:
            params["context"] = plain(context)
        label = str(ref.get("name") or ref.get("uri") or "")
        left = max(end - anyio.current_time(), 1e-3)
        outcome = await self._pass("completion/complete", repr(label), params, left, principal)
        return _completed(ref, outcome)

    async def _pass(
        self,
        method: str,
        label: str,
        params: Mapping[str, Any],
        timeout: float | None,
        principal: str | None,
    ) -> ToolReply | RequestFailed:
        """One request passed through the source (`Source.forward`) by one deadline
        (`send_once`), the hints its answer carried heard: every pass-through's sender."""
        who = principal if principal is not None else self.principal
        forward = self.source.forward
        end = anyio.current_time() + checked_deadline(timeout, self.read_timeout)

        async def send() -> ToolReply | RequestFailed:
            if forward is None:
                return cannot_forward(self.source, method)
            return await forward(method, params, who)

        outcome = await send_once(method, f"{method} {label}", send, end, self.source)
        if outcome.hints:
            self._feed_hints(outcome.hints)
        return outcome


def offers_completions(info: ServerInfo | None) -> bool:
    """Whether a server may be asked for completions: it declared the ``completions``
    capability (``server/discover`` or ``initialize``), or what it declared is not known
    (no discovery answer yet: its own ``-32601`` then says)."""
    if info is None or not info.raw:
        return True
    capabilities = info.raw.get("capabilities")
    return isinstance(capabilities, Mapping) and isinstance(
        capabilities.get("completions"), Mapping
    )


def _completed(ref: Mapping[str, Any], outcome: ToolReply | RequestFailed) -> CompletionResult:
    if isinstance(outcome, RequestFailed):
        if outcome.kind in ("denied", "not_found"):
            return CompletionResult(ref, outcome.kind, detail=outcome.detail)
        return CompletionResult(ref, "unavailable", reason=outcome.kind, detail=outcome.detail)
    completion = outcome.result.get("completion")
    values = completion.get("values") if isinstance(completion, Mapping) else None
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        detail = "completion/complete: an unusable result (no completion values)"
        return CompletionResult(ref, "unavailable", reason="server_error", detail=detail)
    return CompletionResult(ref, "answered", result=frozen(outcome.result))


def _judged(name: str, outcome: ToolReply | RequestFailed) -> PromptResult:
    if isinstance(outcome, RequestFailed):
        if outcome.kind in ("denied", "not_found"):
            return PromptResult(name, outcome.kind, detail=outcome.detail)
        return PromptResult(name, "unavailable", reason=outcome.kind, detail=outcome.detail)
    result = outcome.result
    if input_required(result):
        asked = continuation(result)
        if isinstance(asked, str):
            return PromptResult(name, "unavailable", reason="server_error", detail=asked)
        return PromptResult(name, "input_required", input_requests=asked[0], request_state=asked[1])
    if result.get("resultType", "complete") != "complete" or not isinstance(
        result.get("messages"), (list, tuple)
    ):
        detail = "prompts/get: an unusable result (no messages, or not complete)"
        return PromptResult(name, "unavailable", reason="server_error", detail=detail)
    return PromptResult(name, "answered", result=frozen(result))


__all__ = [
    "CompletionResult",
    "CompletionState",
    "PromptResult",
    "PromptState",
    "Prompts",
    "check_continuation",
    "continuation",
    "offers_completions",
    "send_once",
]
