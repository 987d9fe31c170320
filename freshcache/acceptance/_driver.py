"""The harness side of the driver protocol (docs/driver-protocol.md): one subprocess
per run that drives the client under test, spoken to in JSON lines on its stdin and
stdout. Requests carry ids, so a read left running in the background does not hold
up the next request; answers may come in any order.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from freshcache import FreshCacheError

PROTOCOL_VERSION = 1


class DriverError(FreshCacheError):
    """The driver broke the protocol, died, or did not answer in time."""


@dataclass(frozen=True, slots=True)
class Hello:
    """What a driver says it can do, from its answer to ``hello``."""

    client: str
    states: bool
    transports: tuple[str, ...]
    ops: frozenset[str]
    listens: bool = False
    principals: bool = False
    policies: frozenset[str] = field(default_factory=frozenset)
    store_entries: bool = False
    revisions: frozenset[str] = frozenset({"2026-07-28"})
    """The MCP revisions the client can speak to a server (``2025-11-25`` too: the
    ``-2025`` wires play it)."""

    @classmethod
    def parse(cls, answer: dict[str, Any]) -> Hello:
        if answer.get("protocol") != PROTOCOL_VERSION:
            raise DriverError(
                f"the driver speaks protocol {answer.get('protocol')!r}; this harness speaks "
                f"{PROTOCOL_VERSION}"
            )
        return cls(
            client=str(answer.get("client", "unnamed client")),
            states=bool(answer.get("states", False)),
            transports=tuple(answer.get("transports", ("http",))),
            ops=frozenset(answer.get("ops", ("read", "list", "select", "close"))),
            listens=bool(answer.get("listens", False)),
            principals=bool(answer.get("principals", False)),
            policies=frozenset(answer.get("policies", ())),
            store_entries=bool(answer.get("store_entries", False)),
            revisions=frozenset(answer.get("revisions", ("2026-07-28",))),
        )


class DriverProcess:
    """The driver subprocess: started on first use, started again if it died."""

    def __init__(
        self, argv: list[str], *, env: dict[str, str] | None = None, log: Path | None = None
    ) -> None:
        self.argv = argv
        self.env = env
        self.log = log or Path(tempfile.gettempdir()) / f"freshcache-driver-{os.getpid()}.log"
        """Where the driver's stderr goes (its own diagnostics and its servers')."""
        self.hello: Hello | None = None
        self._process: anyio.abc.Process | None = None
        self._waiting: dict[int, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._next_id = 0
        self._tg: anyio.abc.TaskGroup | None = None
        self._lock = anyio.Lock()
        self.unanswered: tuple[str, float] | None = None
        """The request a deadline outside `request` gave up waiting on, and for how
        long it had waited (a driver that hangs); cleared by the caller."""
        self.client_ended: str | None = None
        """Why the open row's client can no longer reach its server, as the driver said
        in an ``ended`` notice (``None``: it said nothing); cleared at each ``open``."""

    async def __aenter__(self) -> DriverProcess:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)

    async def ensure_started(self) -> Hello:
        """The driver's hello; starts the process (again) when it is not running."""
        async with self._lock:
            if self._process is None or self._process.returncode is not None:
                await self._start()
        assert self.hello is not None
        return self.hello

    async def _start(self) -> None:
        assert self._tg is not None
        await self._stop()
        # Loopback traffic must not go through a proxy from the environment.
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", **(self.env or {})}
        try:
            with self.log.open("ab") as log:
                self._process = await anyio.open_process(
                    self.argv, env=env, stderr=log, start_new_session=True
                )
        except OSError as exc:
            raise DriverError(f"cannot start the driver {self.argv[0]!r}: {exc}") from exc
        self._tg.start_soon(self._read_answers, self._process)
        answer = await self.request("hello", wait=60.0)
        self.hello = Hello.parse(answer)

    async def _read_answers(self, process: anyio.abc.Process) -> None:
        assert process.stdout is not None
        buffered = BufferedByteReceiveStream(process.stdout)
        with contextlib.suppress(
            anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError
        ):
            while True:
                line = await buffered.receive_until(b"\n", 1 << 26)
                try:
                    answer = json.loads(line)
                    if answer.get("id") is None and answer.get("ended"):
                        self.client_ended = str(answer["ended"])  # a notice, not an answer
                        continue
                    waiting = self._waiting.pop(int(answer["id"]))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue  # not an answer to anything asked: ignored
                waiting[1].append(answer)
                waiting[0].set()
        for event, _ in self._waiting.values():
            event.set()  # the driver is gone: every waiting request learns it

    async def request(self, op: str, *, wait: float = 30.0, **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its answer; raises `DriverError` if none comes."""
        process = self._process
        if process is None or process.stdin is None or process.returncode is not None:
            raise DriverError("the driver is not running")
        if op == "open":
            self.client_ended = None  # notices before this one were about earlier rows
        self._next_id += 1
        request_id = self._next_id
        event, slot = anyio.Event(), list[dict[str, Any]]()
        self._waiting[request_id] = (event, slot)
        message = json.dumps({"id": request_id, "op": op, **fields}).encode() + b"\n"
        try:
            await process.stdin.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self._waiting.pop(request_id, None)
            raise DriverError(f"the driver stopped taking requests ({op})") from exc
        sent = anyio.current_time()
        try:
            with anyio.move_on_after(wait):
                await event.wait()
        except anyio.get_cancelled_exc_class():
            if not slot and not event.is_set() and self.unanswered is None:
                self.unanswered = (op, anyio.current_time() - sent)
            raise
        finally:
            self._waiting.pop(request_id, None)
        if not slot:
            if event.is_set():
                status = await self._exit_status(process)
                raise DriverError(
                    f"the driver exited with status {status} during {op!r} (its stderr: {self.log})"
                )
            # A driver that hangs is stopped, so that the next case starts it again
            # instead of waiting on it once more.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            raise DriverError(f"the driver gave no answer to {op!r} within {wait:g} s")
        answer: dict[str, Any] = slot[0]
        if "protocol_error" in answer:
            raise DriverError(f"the driver refused {op!r}: {answer['protocol_error']}")
        return answer

    async def kill(self) -> None:
        """Stop a driver that hangs; the next `ensure_started` starts it again."""
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.CancelScope(shield=True), anyio.move_on_after(10.0):
                await process.wait()

    @staticmethod
    async def _exit_status(process: anyio.abc.Process) -> str:
        """The exit status of a driver whose output ended (``?`` if it lingers)."""
        with anyio.move_on_after(5.0):
            await process.wait()
        return "?" if process.returncode is None else str(process.returncode)

    async def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                with contextlib.suppress(Exception):
                    await process.stdin.aclose()  # end of input: the driver exits
            with anyio.move_on_after(5.0):
                await process.wait()
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # its own group, by its pid
                await process.wait()
            with contextlib.suppress(Exception):
                await process.aclose()


__all__ = ["DriverError", "DriverProcess", "Hello"]
