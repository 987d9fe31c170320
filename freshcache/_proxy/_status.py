"""An opt-in look at what the proxy's upstream caches are doing, for the grader.

With ``FRESHCACHE_PROXY_STATUS=PATH`` in its environment the proxy answers every
connection to the Unix socket at PATH with one JSON line, `describe`, and closes it:
the acceptance driver that plays a client through the proxy
(``proxied_mcp_driver``) asks it when the harness wants to know whether the client
side has taken in everything the server did (reads in flight, frames not yet taken,
the stream's state), so the harness waits on progress instead of a fixed quiet time.
Nothing is served without the variable; the status carries no content.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from typing import Any

import anyio

from .. import HttpSource, StdioSource
from ._server import Proxy

log = logging.getLogger("freshcache.proxy")

STATUS_VARIABLE = "FRESHCACHE_PROXY_STATUS"


def describe(proxy: Proxy) -> dict[str, Any]:
    """Each upstream cache's reads due, re-list, stream state, selection, counters, and
    what its source has taken in (HTTP listen streams; a stdio process and its lines)."""
    links: list[dict[str, Any]] = []
    for link in proxy.links:
        cache = link.cache
        view: dict[str, Any] = {
            "name": link.name,
            "due": cache.pending_reads + cache.queued_reads,
            "relisting": cache.relisting,
            "stream": cache.stream_status,
            "selected": sorted(cache.selected),
            "server_reads": cache.engine.counters.server_reads,
            "untrusted_messages": cache.engine.counters.untrusted_messages,
            "tracked_uris": cache.engine.tracked_uris,
            "acknowledgments": cache.engine.counters.acknowledgments,
        }
        source = cache.source
        if isinstance(source, HttpSource):
            view["streams"] = {
                str(sid): {
                    "uris": sorted(s.uris),
                    "acknowledged": s.acknowledged,
                    "frames": s.frames,
                }
                for sid, s in list(source.streams.items())
            }
        elif isinstance(source, StdioSource):
            stats = source.stats()
            view["stdio"] = {
                "pid": stats.pid,
                "backlog": stats.backlog,
                "lines_from_current": stats.lines_from_current,
            }
        links.append(view)
    return {"links": links}


async def serve_status(proxy: Proxy, path: str) -> None:
    """Answer connections to the Unix socket ``path`` with `describe` until cancelled.

    Opt-in test equipment: a path it cannot bind is logged and the proxy goes on; at exit
    it removes only the socket it bound (not one another proxy bound there since)."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)  # a socket left by an earlier run; never another file
    try:
        listener = await anyio.create_unix_listener(path)
        bound = os.stat(path).st_ino
    except OSError as exc:
        log.warning("%s=%s: no status socket (%s)", STATUS_VARIABLE, path, exc)
        return

    async def answer(stream: Any) -> None:
        async with stream:
            try:
                line = json.dumps(describe(proxy)).encode() + b"\n"
            except Exception:  # a status that cannot be told is no reason to stop the proxy
                log.exception("the proxy's status could not be described")
                return
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.send(line)

    try:
        async with listener:
            await listener.serve(answer)
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == bound:
                os.unlink(path)
