"""The official Python SDK's client (`mcp_driver`) with ``freshcache proxy`` between it and
the row's server: the grader through the proxy (docs/proxy.md, "Graded").

Each row's client runs ``freshcache proxy`` over stdio as its server, and the proxy
reaches the row's server the way the harness says (its URL, or its command after
``--``), with ``--timeout`` the row's read timeout. Reads, lists and catalogs are
`McpDriver`'s; what this driver adds is what the pair can say:

- an error from the proxy carries its state and reason in the JSON-RPC error's
  ``data`` (``awaiting_fresh_source``/``timeout``, ``denied``, ...): that is the
  answer's state, so rows that pin a state are graded on it (text has none: it is
  judged as text, as for the SDK alone);
- ``look`` and ``inspect`` ask the proxy process itself, over the opt-in status
  socket it serves when started with ``FRESHCACHE_PROXY_STATUS`` (its reads in
  flight, the frames and lines its upstream cache has taken in, its stream's state,
  its untrusted-message count), so the harness waits for the proxy's progress, not a
  fixed quiet time. The stream a row checks is the proxy's stream to the server: the
  SDK client's own listen goes to the proxy, which the server never sees.

Run: ``freshcache acceptance --client-cmd 'python -m
freshcache.acceptance.drivers.proxied_mcp_driver'``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import anyio
from mcp import MCPError

from ._loop import hello as hello_answer
from ._loop import run
from .freshcache_driver import FreshcacheSession
from .mcp_driver import McpDriver, McpSession

STATUS_VARIABLE = "FRESHCACHE_PROXY_STATUS"
"""The proxy's opt-in status socket (freshcache/_proxy/_status.py)."""


def proxy_command(spec: dict[str, Any], status: str | None = None) -> list[str]:
    """``freshcache proxy`` in front of the row's server (this interpreter, this
    ``PYTHONPATH``: the SDK starts a stdio server with a minimal environment), serving
    its status on the Unix socket ``status`` when given."""
    upstream = [spec["url"]] if spec["transport"] == "http" else ["--", *spec["command"]]
    timeout = spec.get("timeouts", {}).get("read", 2.0)
    proxy = [sys.executable, "-m", "freshcache", "proxy", "--timeout", str(timeout)]
    path = os.environ.get("PYTHONPATH")
    env = [f"PYTHONPATH={path}"] if path else []
    if status is not None:
        env.append(f"{STATUS_VARIABLE}={status}")
    return [*(["env", *env] if env else []), *proxy, *upstream]


def _steady(link: dict[str, Any]) -> bool:
    """Whether the proxy's stream to the server is where it stays (open, or none)."""
    return link["stream"] in ("live", "unsupported", "disabled")


class ProxiedSession(McpSession):
    status_path = ""
    """The proxy's status socket (set by `ProxiedMcpDriver.connect`)."""
    _proxy_seen = False

    def failed(self, exc: Exception) -> dict[str, Any]:
        """The proxy's state and reason, from the JSON-RPC error's ``data``."""
        data = exc.data if isinstance(exc, MCPError) else None
        answer = super().failed(exc)
        if isinstance(data, dict) and isinstance(data.get("state"), str):
            answer.update(state=data["state"], reason=data.get("reason"), detail=str(exc))
        return answer

    async def read(self, uri: str, timeout: float | None, principal: str | None) -> dict[str, Any]:
        """`McpSession.read`, with whether the proxy sent the server a read meanwhile
        (what a state's ``server read`` means; the server cannot count a read it
        never got, such as one sent while it is down)."""
        before = await self._server_reads()
        answer = await super().read(uri, timeout, principal)
        after = await self._server_reads()
        if before is not None and after is not None:
            answer["server_read"] = after > before
        return answer

    async def _server_reads(self) -> int | None:
        status = await self._proxy_status()
        return None if status is None else int(status["links"][0]["server_reads"])

    async def _proxy_status(self) -> dict[str, Any] | None:
        """The proxy's `describe` (``None``: its socket is not up, or no longer)."""
        try:
            with anyio.fail_after(5.0):
                async with await anyio.connect_unix(self.status_path) as stream:
                    data = b""
                    async for chunk in stream:
                        data += chunk
            status: dict[str, Any] = json.loads(data)
        except (OSError, ValueError, TimeoutError):
            return None
        self._proxy_seen = True
        return status

    async def look(self, message: dict[str, Any]) -> dict[str, Any]:
        """What the proxy has not taken in of what the server says it did (the checks
        of the freshcache driver's ``look``, on the proxy's upstream cache)."""
        return {"busy": await self._busy(message["server"])}

    async def _busy(self, server: dict[str, Any]) -> str | None:
        if self.listening_for != self.selection and not self._cut_off.is_set():
            return "the client's listen to the proxy is not acknowledged yet"
        status = await self._proxy_status()
        if status is None:
            gone = self._proxy_seen or self._cut_off.is_set()
            return None if gone else "the proxy is starting"
        (link,) = status["links"]  # one upstream: the row's server
        if link["due"] > int(server.get("reads_held", 0)):
            return f"the proxy: {link['due']} reads in flight or queued"
        if link["relisting"]:
            return "the proxy: a re-list is under way"
        if "streams" in link:
            streams = {sid: SimpleNamespace(**s) for sid, s in link["streams"].items()}
            busy = FreshcacheSession._http_busy(SimpleNamespace(streams=streams), server, None)  # type: ignore[arg-type]
        else:
            stats = SimpleNamespace(**link["stdio"])
            source = SimpleNamespace(stats=lambda: stats)
            busy = FreshcacheSession._stdio_busy(source, server)  # type: ignore[arg-type]
            # No server process runs, and the server is not down: the proxy starts the
            # next one when it listens again (within its reconnect backoff).
            restarting = "pid" not in server and server.get("down") is False
            if busy is None and restarting and link["selected"] and not _steady(link):
                busy = "no server process: the proxy has not started the next one yet"
        if busy is None and server.get("wants_stream") and link["selected"]:
            if not _steady(link):
                busy = f"the proxy's stream is {link['stream']}"
            elif "streams" in link and not any(
                s["uris"] == link["selected"] and s["acknowledged"]
                for s in link["streams"].values()
            ):
                busy = "the proxy has no acknowledged stream for its selection yet"
        return None if busy is None else f"the proxy: {busy}"

    async def inspect(self, message: dict[str, Any]) -> dict[str, Any]:
        """The proxy's stream to the server and its counters."""
        status = await self._proxy_status()
        if status is None:
            return {"stream": "closed (the proxy is not running)"}
        (link,) = status["links"]
        return {
            "stream": link["stream"],
            "untrusted_messages": link["untrusted_messages"],
            "tracked_uris": link["tracked_uris"],
        }


class ProxiedMcpDriver(McpDriver):
    session_class = ProxiedSession

    def hello(self) -> dict[str, Any]:
        said = super().hello()
        return hello_answer(
            f"{said['client']} through freshcache proxy",
            # No ``advance``, store bound or policy: the SDK's clock, store and sharing
            # no longer decide anything (the proxy answers with ``ttlMs`` 0), and the
            # proxy's own run on real time with their defaults.
            ops=["catalog", "look", "inspect"],
            # The server sees the proxy's listen (for what the client subscribed to and
            # what it read), not the client's: `look` waits for it, not the harness.
            listens=False,
            revisions=said["revisions"],
        )

    @asynccontextmanager
    async def connect(self, spec: dict[str, Any]) -> AsyncIterator[McpSession]:
        folder = tempfile.mkdtemp(prefix="fc-proxied-")
        status = os.path.join(folder, "status.sock")
        # The client waits past the proxy's own deadline, so that the proxy's answer
        # (``awaiting_fresh_source``/``timeout``) reaches it, not the SDK's timeout.
        timeouts = dict(spec.get("timeouts", {}))
        timeouts["read"] = 2 * float(timeouts.get("read", 2.0)) + 1.0
        command = proxy_command(spec, status)
        proxied = {**spec, "transport": "stdio", "command": command, "timeouts": timeouts}
        try:
            async with super().connect(proxied) as session:
                assert isinstance(session, ProxiedSession)
                session.status_path = status
                yield session
        finally:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    run(ProxiedMcpDriver())
