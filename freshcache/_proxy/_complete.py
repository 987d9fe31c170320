"""``completion/complete`` through the proxy (`Completions`).

A completion is computed from what the host typed so far: it is passed through to the
upstream that owns the prompt or resource template the request's ``ref`` names
(`FreshCache.complete`: the one pass-through sender of ``prompts/get`` too, never
cached). A prompt is named as the host knows it (the upstream's prefix mapped back,
as for ``prompts/get``); a template's URI is not renamed, so with several upstreams
the first (config order) whose fresh template list has it owns it. An upstream that
declares no ``completions`` capability gets nothing: the host gets ``-32601``.

The proxy offers ``completions`` to hosts (``initialize``, ``server/discover``) only
when some upstream does: those answers wait for the upstreams' discovery, up to the
proxy's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from .. import FRESH, FreshCacheError, MethodNotFoundError, ServerInfo
from .._protocol._tools import plain

_HANDSHAKES = frozenset({"initialize", "server/discover"})


class Completions:
    """The proxy's ``completion/complete`` handler and its capability middleware."""

    def __init__(
        self,
        links: list[Any],
        owner: Callable[[str], tuple[Any, str] | None],
        who: Callable[[Any], str | None],
        timeout: float,
    ) -> None:
        self._links = links
        self._owner = owner
        self._who = who
        self._timeout = timeout

    def offered(self) -> bool:
        """Whether some upstream declared ``completions`` (as far as is known now)."""
        return any(declares_completions(link.cache.server_info) for link in self._links)

    async def middleware(self, ctx: Any, call_next: Any) -> Any:
        """A `ServerMiddleware`: the handshake's capabilities say ``completions`` only
        when some upstream does (the SDK offers it for the handler alone)."""
        if ctx.method not in _HANDSHAKES:
            return await call_next(ctx)
        with anyio.move_on_after(self._timeout):
            for link in self._links:
                await link.cache.discovered()
        result = await call_next(ctx)
        capabilities = result.get("capabilities") if isinstance(result, dict) else None
        if isinstance(capabilities, dict) and not self.offered():
            capabilities.pop("completions", None)
        return result

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> dict[str, Any]:
        sent = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        ref: dict[str, Any] = dict(sent.get("ref") or {})
        who = self._who(ctx)
        if ref.get("type") == "ref/prompt":
            label = str(ref.get("name", ""))
            owner = self._owner(label)
            link = None if owner is None else owner[0]
            if owner is not None:
                ref["name"] = owner[1]
        else:
            label = str(ref.get("uri", ""))
            link = await self._template_owner(label, who)
        if link is None:
            data = {"state": "not_found", "reason": None, "ref": sent.get("ref")}
            raise MCPError(code=-32602, message=f"freshcache: no {label!r} to complete", data=data)
        try:
            got = await link.cache.complete(
                ref, sent.get("argument") or {}, sent.get("context"), principal=link.principal(who)
            )
        except MethodNotFoundError as exc:  # no completions capability, or -32601
            raise MCPError(code=-32601, message=str(exc)) from None
        if got.state != "answered":
            code = {"not_found": -32602, "denied": -32003}.get(got.state, -32000)
            data = {"state": got.state, "reason": got.reason, "ref": sent.get("ref")}
            if got.detail:
                data["detail"] = got.detail
            because = f" ({got.reason})" if got.reason else ""
            message = f"freshcache: completing {label} is {got.state}{because}"
            raise MCPError(code=code, message=message, data=data)
        completion = (got.result or {}).get("completion") or {}
        return {"completion": plain(completion), "resultType": "complete"}

    async def _template_owner(self, uri: str, who: str | None) -> Any:
        """The first upstream (config order) whose fresh template list has ``uri``."""
        if len(self._links) == 1:
            return self._links[0]
        for link in self._links:
            try:
                templates = await link.cache.resource_templates(principal=link.principal(who))
            except FreshCacheError:
                continue  # no template list, or none to be had now
            if templates.state == FRESH and any(
                item.get("uriTemplate") == uri for item in templates.items
            ):
                return link
        return None


def declares_completions(info: ServerInfo | None) -> bool:
    """Whether a discovery (or ``initialize``) answer declared ``completions``."""
    capabilities = info.raw.get("capabilities") if info is not None else None
    return isinstance(capabilities, Mapping) and isinstance(
        capabilities.get("completions"), Mapping
    )


__all__ = ["Completions", "declares_completions"]
