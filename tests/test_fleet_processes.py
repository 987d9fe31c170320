"""The fleet as separate processes: 4 workers (`benchmarks/fleet_worker.py`) against the
official-SDK fixture server over HTTP and a real Valkey; the listener is killed,
Valkey (and Redis, where the machine has it) stopped and restarted, resources changed
meanwhile."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from freshcache.acceptance._valkey import LocalStore
from tests.conftest import SdkServer
from tests.valkey_support import STORE_KINDS, start_store

WORKER = Path(__file__).resolve().parent.parent / "benchmarks" / "fleet_worker.py"
URI = "bench://doc"


class Worker:
    def __init__(self, mcp: str, valkey: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), mcp, URI, valkey],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(json.loads(line))

    def last(self, key: str) -> dict[str, Any] | None:
        while not self._lines.empty():
            self.seen.append(self._lines.get_nowait())
        return next((m for m in reversed(self.seen) if key in m), None)

    @property
    def text(self) -> str | None:
        m = self.last("state")
        return None if m is None or m["state"] != "fresh" else m["text"]

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    @property
    def leading(self) -> bool:
        return bool((self.last("leading") or {}).get("leading"))


def read_until(workers: list[Worker], text: str, timeout: float = 45.0) -> None:
    """Every worker reads (``read`` on its stdin) until it hands out ``text``: a follower
    re-reads a change it heard on the fleet channel when it is read, and one the change
    has not reached yet still hands out the text before it (it is told again)."""
    deadline = time.monotonic() + timeout
    while not all(w.text == text for w in workers):
        if time.monotonic() > deadline:
            raise AssertionError(f"not every worker at {text} before the deadline")
        for w in workers:
            if w.text != text:
                w.tell("read")
        until = time.monotonic() + 0.2
        while time.monotonic() < until and not all(w.text == text for w in workers):
            time.sleep(0.01)


def wait(check: Callable[[], bool], timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.01)


@pytest.fixture(params=STORE_KINDS)
def valkey(request: pytest.FixtureRequest) -> Iterator[LocalStore]:
    """Valkey, and Debian's redis-server where the machine has it."""
    server = start_store(request.param)
    try:
        yield server
    finally:
        server.stop()


def test_four_worker_processes_survive_a_killed_listener_and_a_store_restart(
    sdk_server: SdkServer, valkey: LocalStore
) -> None:
    sdk_server.control("set", uri=URI, text="v0", notify=False)
    workers = [Worker(sdk_server.url, valkey.url) for _ in range(4)]
    try:
        wait(lambda: all(w.text == "v0" for w in workers))
        wait(lambda: sum(w.leading for w in workers) == 1)
        before = sdk_server.reads(URI)
        sdk_server.control("set", uri=URI, text="v1", notify=True)
        read_until(workers, "v1")
        assert sdk_server.reads(URI) - before == 1  # one server read for the whole fleet

        # The listener dies without a word; the resource changes meanwhile.
        listener = next(w for w in workers if w.leading)
        listener.proc.send_signal(signal.SIGKILL)
        listener.proc.wait()
        rest = [w for w in workers if w is not listener]
        sdk_server.control("set", uri=URI, text="v2", notify=True)
        # A takeover waits out the dead listener's lease, then re-listens and re-reads:
        # generous deadlines, for a loaded 2-core machine.
        wait(lambda: sum(w.leading for w in rest) == 1, timeout=60.0)
        read_until(rest, "v2", timeout=60.0)

        # The store restarts (empty); the resource changes while it is down.
        marks = [len(w.seen) for w in rest]
        valkey.stop()
        sdk_server.control("set", uri=URI, text="v3", notify=True)
        valkey.start()
        read_until(rest, "v3")
        sdk_server.control("set", uri=URI, text="v4", notify=True)
        read_until(rest, "v4")
        for w, mark in zip(rest, marks, strict=True):
            # Every worker ends on the newest text, heard through the new listener.
            later = [m for m in w.seen[mark:] if m.get("state") == "fresh"]
            assert [m["text"] for m in later][-1] == "v4"
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait()
            for stream in (w.proc.stdin, w.proc.stdout):
                if stream is not None:
                    stream.close()
