"""Test support that ships with freshcache: the reference server behind real
transports, and the acceptance-table worlds that play rows over them.

Imported lazily so that ``import freshcache`` never pays for it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HttpWorld", "ReferenceProtocol", "StdioWorld"]


def __getattr__(name: str) -> Any:
    if name == "ReferenceProtocol":
        from ._protocol import ReferenceProtocol

        return ReferenceProtocol
    if name == "HttpWorld":
        from ._http_world import HttpWorld

        return HttpWorld
    if name == "StdioWorld":
        from ._stdio_world import StdioWorld

        return StdioWorld
    raise AttributeError(f"module 'freshcache.testing' has no attribute {name!r}")
