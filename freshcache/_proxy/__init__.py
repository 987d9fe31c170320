"""``freshcache proxy``: freshcache's promise for hosts that cannot import it.

An MCP server, launched the way a host launches any server (stdio, or Streamable HTTP
with ``--http HOST:PORT``), in front of the servers the host already uses: each
upstream goes through its own `FreshCache`, and what a host gets is fresh or an
explicit error, never old (invariant 18). Built on the official ``mcp`` SDK's server
(the ``proxy`` extra); ``import freshcache`` never imports this package.

- `_config`: the upstreams, from ``URL``, ``-- COMMAND ...`` or a host's ``mcpServers`` file;
- `_server`: `Proxy`, the handlers between hosts and the upstream caches;
- `_hosts`: who subscribed to what, and telling them, on both revisions;
- `_notices`: when a host must be told (sans-IO);
- `_run`: the command itself: stdio or HTTP, signals.
"""

from __future__ import annotations

import argparse

from .._errors import MissingDependencyError

INSTALL = "pip install 'freshcache[proxy]'"


def run(args: argparse.Namespace) -> int:
    """``freshcache proxy``: serve until the host goes away or a signal comes."""
    from ._config import upstreams_of

    upstreams = upstreams_of(args)  # a mistake is said before anything is imported
    try:
        import mcp.server  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"freshcache proxy needs the MCP SDK's server ({exc.name} is missing): {INSTALL}"
        ) from None
    from ._run import main

    return main(args, upstreams)


__all__ = ["INSTALL", "run"]
