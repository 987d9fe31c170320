"""Real processes for the command-line tests: ``freshcache serve`` and a plain web server.

Both run as subprocesses on free loopback ports, are waited for with a deadline and
stopped by PID. Their output goes to files in the test's temporary folder, read while
they run (no pipe can fill up and block them).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import free_port
from tests.polling import scaled, until_sync

URL_LINE = re.compile(r"freshcache serve: (http://127\.0\.0\.1:\d+/mcp) ")
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def cli(*args: str) -> list[str]:
    """The command line that runs ``freshcache ARGS`` with this interpreter."""
    return [sys.executable, "-m", "freshcache._cli", *args]


def run_cli(
    *args: str, timeout: float = 90.0, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(*args), capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=ENV
    )


@dataclass
class Served:
    """A running ``freshcache serve`` over HTTP."""

    process: subprocess.Popen[bytes]
    url: str
    out: Path
    err: Path

    def output(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def wait_for_output(self, text: str, timeout: float = 30.0) -> None:
        try:
            until_sync(lambda: text in self.output(), timeout)
        except TimeoutError:
            raise AssertionError(f"serve never printed {text!r}: {self.output()!r}") from None

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        """Send ``sig`` (Ctrl-C by default) and wait for the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
                raise AssertionError(f"serve ignored signal {sig} for {timeout}s") from None
        return self.process.returncode


def start_serve(tmp: Path, *args: str, timeout: float = 60.0) -> Served:
    """``freshcache serve ARGS --port 0``; returns once it printed its URL."""
    out, err = tmp / "serve.out", tmp / "serve.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            cli("serve", *args, "--port", "0"), stdout=stdout, stderr=stderr, env=ENV
        )

    def started() -> bool:
        return bool(URL_LINE.search(out.read_text(encoding="utf-8", errors="replace")))

    with contextlib.suppress(TimeoutError):
        until_sync(lambda: started() or process.poll() is not None, timeout)
    found = URL_LINE.search(out.read_text(encoding="utf-8", errors="replace"))
    if found is None:
        process.kill()
        process.wait(timeout=10)
        raise RuntimeError(f"freshcache serve did not start: {err.read_text()!r}")
    return Served(process, found.group(1), out, err)


@dataclass
class WebServer:
    """``python -m http.server``: a URL that answers HTTP but not MCP."""

    process: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_web_server(folder: Path, timeout: float = 30.0) -> WebServer:
    timeout = scaled(timeout)
    (folder / "index.html").write_text("<!DOCTYPE html><html><body>a web page</body></html>")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"

    def answers() -> bool:
        try:
            httpx.get(url, timeout=1.0)
        except httpx.TransportError:
            return process.poll() is not None
        return True

    with contextlib.suppress(TimeoutError):
        until_sync(answers, timeout)
    if process.poll() is not None or not answers():
        process.kill()
        process.wait(timeout=10)
        raise RuntimeError("python -m http.server did not start")
    return WebServer(process, url)
