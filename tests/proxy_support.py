"""The host side of the proxy's tests: the official Python SDK client (`mcp.Client`) as an
MCP host, on either revision, over stdio (it starts ``freshcache proxy`` as a host
does) or Streamable HTTP (``freshcache proxy --http 127.0.0.1:0``, a subprocess).

`Host` records every change notification it hears, whichever way its revision hears
them: 2025-11-25 on its session (``resources/subscribe``, the session's own
``*/list_changed``), 2026-07-28 on a ``subscriptions/listen`` stream it opens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from tests.polling import scaled, until

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
URL_LINE = re.compile(r"freshcache proxy: serving (http://127\.0\.0\.1:\d+/mcp) ")
MODES = {"2026-07-28": "2026-07-28", "2025-11-25": "legacy"}


def proxy_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "freshcache._cli", "proxy", *args]


class Host:
    """One connected host and what it heard."""

    def __init__(self, client: Any, revision: str, status: Path | None = None) -> None:
        self.client = client
        self.revision = revision
        self.status_path = status
        """The proxy's status socket (``FRESHCACHE_PROXY_STATUS``), when it serves one."""
        self.heard: list[str] = []
        """``updated URI`` and ``tools``/``prompts``/``resources`` (a list changed)."""

    async def on_message(self, message: Any) -> None:
        """The 2025 session's notifications (`mcp.Client`'s ``message_handler``). A
        2026-07-28 client hands this handler its listen streams' notifications too:
        those are recorded once, from the stream (`heard_event`)."""
        if self.revision != "2025-11-25":
            return
        message = getattr(message, "root", message)
        method = getattr(message, "method", "")
        if method == "notifications/resources/updated":
            self.heard.append(f"updated {message.params.uri}")
        elif method.endswith("/list_changed"):
            self.heard.append(method.split("/")[1])

    def heard_event(self, event: Any) -> None:
        """A 2026 listen stream's event."""
        name = type(event).__name__
        if name == "ResourceUpdated":
            self.heard.append(f"updated {event.uri}")
        else:
            self.heard.append(name.removesuffix("ListChanged").lower())

    async def subscribe(self, tg: anyio.abc.TaskGroup, uri: str) -> None:
        """Subscribe to ``uri`` (and, on 2026, to every list change) the host's way."""
        if self.revision == "2025-11-25":
            from mcp.shared.exceptions import MCPDeprecationWarning

            with warnings.catch_warnings():  # the 2025 way, on purpose
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await self.client.session.subscribe_resource(uri)
            return
        acknowledged = anyio.Event()

        async def listen() -> None:
            async with self.client.listen(
                resource_subscriptions=[uri],
                tools_list_changed=True,
                prompts_list_changed=True,
                resources_list_changed=True,
            ) as stream:
                acknowledged.set()
                async for event in stream:
                    self.heard_event(event)

        tg.start_soon(listen)
        with anyio.fail_after(scaled(20)):
            await acknowledged.wait()

    async def proxy_status(self) -> dict[str, Any]:
        """The proxy's one upstream, as its status socket describes it now."""
        assert self.status_path is not None, "a host started without status=..."
        async with await anyio.connect_unix(str(self.status_path)) as stream:
            data = b"".join([chunk async for chunk in stream])
        (link,) = json.loads(data)["links"]
        return dict(link)

    def mark(self) -> int:
        """Where the notifications heard from now on start (`heard_of`'s ``since``)."""
        return len(self.heard)

    async def heard_of(self, item: str, since: int = 0) -> None:
        """Wait until ``item`` was heard at or after ``since`` (a `mark` taken before the
        step that must cause it: a notification an earlier event caused does not count)."""
        await until(lambda: item in self.heard[since:], scaled(30))


@asynccontextmanager
async def host(
    upstream: list[str],
    revision: str,
    transport: str,
    tmp: Path,
    *extra: str,
    client_options: dict[str, Any] | None = None,
    status: Path | None = None,
) -> AsyncIterator[Host]:
    """A host connected to ``freshcache proxy UPSTREAM EXTRA...`` (``client_options``:
    more of `mcp.Client`'s, an ``elicitation_callback`` say; ``status``: the Unix
    socket the proxy describes its upstream cache on, `Host.proxy_status`)."""
    from mcp import Client, StdioServerParameters

    holder: list[Host] = []

    async def on_message(message: Any) -> None:
        if holder:
            await holder[0].on_message(message)

    options: dict[str, Any] = {
        "mode": MODES[revision],
        "read_timeout_seconds": scaled(20),
        "message_handler": on_message,
        **(client_options or {}),
    }
    from freshcache._proxy._status import STATUS_VARIABLE

    env = ENV if status is None else {**ENV, STATUS_VARIABLE: str(status)}
    if transport == "stdio":
        target: Any = StdioServerParameters(
            command=sys.executable, args=proxy_command(*extra, *upstream)[1:], env=env
        )
        async with Client(target, **options) as client:
            holder.append(Host(client, revision, status))
            yield holder[0]
        return
    proxy = running_proxy(tmp, "--http", "127.0.0.1:0", *extra, *upstream, env=env)
    with proxy as (_, url):
        async with Client(url, **options) as client:
            holder.append(Host(client, revision, status))
            yield holder[0]


@asynccontextmanager
async def fleet_replicas_subscribed(
    upstream: str, fleet_url: str, tmp: Path, uri: str
) -> AsyncIterator[tuple[Host, Host]]:
    """Two hosts, each in front of its own proxy replica on one fleet (stdio on
    2026-07-28, HTTP on 2025-11-25); each has read ``uri``, listed the tools and
    subscribed to ``uri``. Their subscriptions end when the block does."""
    fleet = ["--fleet", fleet_url]
    sockets = Path(tempfile.mkdtemp(prefix="fc-status-"))  # a Unix socket's path is short
    try:
        async with (
            host([upstream], "2026-07-28", "stdio", tmp, *fleet, status=sockets / "one") as one,
            host([upstream], "2025-11-25", "http", tmp, *fleet, status=sockets / "two") as two,
            anyio.create_task_group() as tg,
        ):
            for h in (one, two):
                assert "v1" in (await h.client.read_resource(uri)).contents[0].text
                await h.client.list_tools()
                await h.subscribe(tg, uri)
            yield one, two
            tg.cancel_scope.cancel()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def replace_text(path: Path, text: str) -> None:
    """Change a served file at once, as an editor saving it does: a look at the folder
    (``freshcache serve --poll``) sees the old text or the new, never the file
    truncated and half written (``write_text`` opens it empty first: a look then would
    serve, and notify, an empty page)."""
    staged = path.with_name(f".{path.name}.new")  # a dot file: never served
    staged.write_text(text)
    staged.replace(path)


class running_proxy:
    """``freshcache proxy ARGS`` as a subprocess; with ``--http``, waits for its URL."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] = ENV) -> None:
        self.err = tmp / f"proxy-{os.getpid()}-{id(self)}.err"
        self.args = args
        self.env = env

    def __enter__(self) -> tuple[subprocess.Popen[bytes], str | None]:
        with self.err.open("wb") as stderr:
            self.process = subprocess.Popen(
                proxy_command(*self.args),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=self.env,
            )
        url = None
        if "--http" in self.args:
            import time

            deadline = time.monotonic() + scaled(30)
            while (found := URL_LINE.search(self.output())) is None:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the proxy never served: {self.output()!r}")
                time.sleep(0.02)
            url = found[1]
        return self.process, url

    def output(self) -> str:
        return self.err.read_text(errors="replace")

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=scaled(15))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdin is not None:
            self.process.stdin.close()
