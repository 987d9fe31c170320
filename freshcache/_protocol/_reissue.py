"""Which requests may be sent again after their answer was lost: the one rule.

A transport can lose an answer after the request reached the server: an SSE answer
that breaks off, a connection cut or a process that dies mid-request, an answer that
cannot be read, no answer in time. The spec says a disconnect is not a cancellation
(basic/transports/streamable-http), so the server may have done what it was asked.

For a request that only reads (a read, a list, discovery, a listen, a ping, the
handshake) doing it twice is harmless: it may be re-issued with a new id. Anything
else, ``tools/call`` first among them (a tool can pay, delete, send) and every method
freshcache does not know, is sent at most once: once it may have reached the server,
its lost answer is an explicit outcome (`RequestFailed.lost`, "it may have run"),
never a silent second send. A request the server *refused* (401, ``-32022``, a
2025-11-25 session it no longer knows, "unknown tool") did not run: sending it again
is no re-issue and is not this rule's to forbid.

Every re-issue path consults `may_reissue`: `HttpBinding.judge` (HTTP, both
revisions); stdio and `McpClientSource` never re-issue, and mark their lost answers
with `lost_answer`.
"""

from __future__ import annotations

from dataclasses import replace

from .._core import RequestFailed
from ._wire import INTERNAL_ERROR

IDEMPOTENT_METHODS = frozenset(
    {
        "server/discover",
        "initialize",
        "ping",
        "resources/read",
        "resources/list",
        "resources/templates/list",
        "tools/list",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "subscriptions/listen",
        "resources/subscribe",
        "resources/unsubscribe",
        "logging/setLevel",
    }
)
"""Methods whose second arrival changes nothing the first did not: safe to re-issue."""


def may_reissue(method: str) -> bool:
    """Whether ``method`` may be sent again (a new id) after its answer was lost."""
    return method in IDEMPOTENT_METHODS


def lost_answer(method: str, failure: RequestFailed) -> RequestFailed:
    """``failure`` (no answer came back after the request was sent) marked `lost`; for
    a method that is not idempotent its detail says what that means."""
    if failure.lost:
        return failure
    detail = failure.detail
    if not may_reissue(method):
        detail = (
            f"{detail}; the request was sent and its answer lost: it may have run (not sent again)"
        )
    return replace(failure, detail=detail, lost=True)


__all__ = ["IDEMPOTENT_METHODS", "lost_answer", "may_reissue"]


SDK_STATUS_ERROR = "Server returned an error response"
"""The official SDK client's own -32603 for an HTTP error status without a JSON-RPC
answer (a gateway's 502 after the request went through): the SDK's words, not the
server's."""


def sdk_answer_lost(code: int, message: str, stand_in_codes: tuple[int, ...]) -> bool:
    """Whether an error the official SDK client raised stands in for an answer that did
    not come (``stand_in_codes``: its own "connection closed" and "no answer in time";
    or its -32603 for an error status without a JSON-RPC answer) rather than being the
    server's JSON-RPC error: a request sent may have run."""
    return code in stand_in_codes or (code == INTERNAL_ERROR and message == SDK_STATUS_ERROR)
