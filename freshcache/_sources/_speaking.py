"""What every source that speaks through a `ClientProtocol` can do, declared once."""

from __future__ import annotations

from .._protocol._client import ClientProtocol


class SpeaksClientProtocol:
    """The capabilities of `HttpSource` and `StdioSource` (see `Source`): pushed bodies
    asked for on the listen; no shared walks."""

    protocol: ClientProtocol
    shared_catalogs = None

    def ask_pushed_bodies(self) -> bool:
        """Ask every listen from now on for pushed bodies (``embedResources``)."""
        self.protocol.embed_resources = True
        return True


__all__ = ["SpeaksClientProtocol"]
