"""``FreshCache.get_prompt``: a request whose result is computed, passed through.

A prompt is built from its arguments each time it is asked for (``prompts/get``):
there is no text to keep fresh, so its answer is never cached, only passed through
the source (`Source.forward`) under one deadline, with the change hints its answer
carried heard on the way (invariant 9). Sending under a deadline is `send_once`, the
same rule `FreshCache.call_tool` sends by; ``input_required`` (basic/patterns/mrtr)
is `continuation`, read the same way for both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio

from .._core import RequestFailed
from .._core._frozen import frozen, frozen_mapping
from .._errors import ConfigurationError, FreshCacheError
from .._protocol._reissue import may_reissue
from .._protocol._tools import ToolReply, input_required, tool_call_params
from .._sources._source import cannot_forward
from ._setup import checked_deadline

if TYPE_CHECKING:
    from .._core import StreamEvent
    from .._sources._source import Source

T = TypeVar("T")

PromptState = Literal["answered", "input_required", "denied", "not_found", "unavailable"]


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

    if TYPE_CHECKING:

        def _feed_hints(self, hints: tuple[StreamEvent, ...]) -> None: ...

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
        who = principal if principal is not None else self.principal
        forward = self.source.forward
        end = anyio.current_time() + checked_deadline(timeout, self.read_timeout)

        async def send() -> ToolReply | RequestFailed:
            if forward is None:
                return cannot_forward(self.source, "prompts/get")
            return await forward("prompts/get", params, who)

        outcome = await send_once("prompts/get", f"prompts/get {name!r}", send, end, self.source)
        if outcome.hints:
            self._feed_hints(outcome.hints)
        return _judged(name, outcome)


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
        return PromptResult(
            name, "input_required", input_requests=asked[0], request_state=asked[1]
        )
    if result.get("resultType", "complete") != "complete" or not isinstance(
        result.get("messages"), (list, tuple)
    ):
        detail = "prompts/get: an unusable result (no messages, or not complete)"
        return PromptResult(name, "unavailable", reason="server_error", detail=detail)
    return PromptResult(name, "answered", result=frozen(result))


__all__ = [
    "PromptResult",
    "PromptState",
    "Prompts",
    "check_continuation",
    "continuation",
    "send_once",
]
