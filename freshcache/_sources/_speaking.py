"""What every source that speaks through a `ClientProtocol` can do, declared once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._core import Partition, RequestFailed
from .._protocol._client import ClientProtocol
from .._protocol._tools import ToolAnswer, ToolRefused, ToolReply

ToolCheck = Callable[[Mapping[str, Any], Partition, Mapping[str, Any] | None], ToolRefused | None]


class SpeaksClientProtocol:
    """The capabilities of `HttpSource` and `StdioSource` (see `Source`): pushed bodies
    asked for on the listen; no shared walks; ``tools/call`` passed through."""

    protocol: ClientProtocol
    shared_catalogs = None
    check_tool_call: ToolCheck | None = None
    """Run before each ``tools/call`` (HTTP: `HttpBinding.prepare_tool_call` refuses a tool
    left out of the catalog and learns the ``Mcp-Param-*`` headers of the one seen)."""

    if TYPE_CHECKING:

        async def forward(
            self, method: str, params: Mapping[str, Any], principal: Partition
        ) -> ToolReply | RequestFailed: ...

    async def call_tool(
        self, params: Mapping[str, Any], principal: Partition, tool: Mapping[str, Any] | None
    ) -> ToolAnswer:
        """`Source.call_tool`: ``tools/call`` passed through (`Source.forward`), never
        re-issued, once `check_tool_call` let it go."""
        check = self.check_tool_call
        refused = None if check is None else check(params, principal, tool)
        return refused or await self.forward("tools/call", params, principal)

    def ask_pushed_bodies(self) -> bool:
        """Ask every listen from now on for pushed bodies (``embedResources``)."""
        self.protocol.embed_resources = True
        return True


__all__ = ["SpeaksClientProtocol"]
