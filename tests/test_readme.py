"""Every code block of the README and of the pages under docs/ runs as written.

- ``python`` blocks run in a subprocess against a real ``freshcache serve`` (the seed
  resources), only the URL's port replaced by the served one;
- ``bash`` blocks run in bash in a temporary folder with this interpreter's
  ``freshcache`` on the PATH; each literal port becomes a free one, a server started in
  the background is waited for (a deadline) before the next line, and whatever a block
  left running is stopped when it ends;
- the seed-8 trace excerpt is checked against a real run of the example that prints it.

A python or bash block that cannot run here is preceded by
``<!-- not run in tests: WHY -->``; `NOT_RUN` lists those, so none is skipped silently.
A README block is named by its section heading, a block of a page under docs/ by the
page and its heading (``docs/cli.md: Your own files #1``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from tests.conftest import free_port
from tests.serve_support import ENV, Served, start_serve

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
V1 = "Shipping approval v1: orders over $500 need a manager."
SKIP = re.compile(r"<!-- not run in tests: (.+?) -->")

pytestmark = pytest.mark.wire


@dataclass(frozen=True)
class Block:
    key: str
    """The section heading and the block's number among the runnable ones there."""
    language: str
    code: str
    not_run: str | None
    """Why it is not run, from the comment line above it."""


def blocks() -> list[Block]:
    return [block for page in PAGES for block in page_blocks(page)]


def page_blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    heading, counts = "", dict[str, int]()
    prefix = "" if page == README else f"{page.relative_to(ROOT).as_posix()}: "
    lines = page.read_text(encoding="utf-8").splitlines()
    at = 0
    while at < len(lines):
        line = lines[at]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        fence = re.fullmatch(r"```(\w*)", line)
        if fence:
            end = lines.index("```", at + 1)
            language = fence.group(1)
            if language in ("python", "bash"):
                counts[heading] = counts.get(heading, 0) + 1
                above = SKIP.fullmatch(lines[at - 1])
                found.append(
                    Block(
                        f"{prefix}{heading} #{counts[heading]}",
                        language,
                        "\n".join(lines[at + 1 : end]) + "\n",
                        above.group(1) if above else None,
                    )
                )
            at = end
        at += 1
    return found


NOT_RUN = {
    "Quick start #1",  # the acceptance tables and the test suite themselves
    "Development #1",
    "docs/acceptance.md: Running the tables #1",
    "docs/acceptance.md: Other clients on the same rows #1",
    "docs/fleet.md: A fleet of workers on Valkey / Redis #1",
    "docs/tracing.md: Tracing and metrics #1",  # pip install of the OpenTelemetry SDK and exporter
    "docs/conformance.md: Rerunning it #1",  # a test module the suite runs itself
    "docs/conformance.md: Rerunning it #2",  # Node 22+ on the PATH and the npm registry
}

FRAMEWORKS = "docs/frameworks.md: "
EXPECT = {
    "Try it on a server #1": [V1],
    "Ten lines #1": [V1],
    "Command line #1": [V1, "advice      none", "guide://shipping/returns: fresh"],
    "docs/cli.md: Serving your own files #1": [
        "freshcache serve: updated file://",
        "/notes/approval.md: fresh",
    ],
    "docs/catalogs.md: Catalogs: tools, prompts and templates #1": ["('search',)"],
    "docs/sources.md: Wrapping a source #1": ["server read: guide://shipping/approval", V1],
    "docs/sources.md: Test doubles for your own tests #1": [
        "awaiting_fresh_source server_error",
        "v2",
    ],
    "docs/freshness.md: Pushed bodies and structured denials #1": ["fresh"],
    "docs/tracing.md: Tracing and metrics #2": ["fresh"],
    f"{FRAMEWORKS}The official MCP client #1": [f"fresh {V1}"],
    f"{FRAMEWORKS}The official MCP client #2": [f"fresh {V1}"],
    f"{FRAMEWORKS}Your own loader #1": [
        "Orders over $500 need a manager.",
        "Orders over $800 need a manager.",
    ],
    f"{FRAMEWORKS}Your own loader #2": ["('search',)", "('search', 'lookup')"],
    f"{FRAMEWORKS}Without async #1": [f"fresh {V1}"],
    f"{FRAMEWORKS}An agent step #1": [V1],
    f"{FRAMEWORKS}An agent step #2": [V1],
    f"{FRAMEWORKS}Inside agent frameworks #1": [V1],
    f"{FRAMEWORKS}Inside agent frameworks #2": [V1],
    f"{FRAMEWORKS}Inside agent frameworks #3": [V1, "Returns v1: 30 days."],
    f"{FRAMEWORKS}Tools that stay current #1": ["('search',)"],
    f"{FRAMEWORKS}Tools that stay current #2": ["['search']"],
    f"{FRAMEWORKS}Tools that stay current #3": ["fresh ['search']"],
}
"""What each block that runs must print (beyond exiting 0)."""

RUN = sorted(b.key for b in blocks() if b.not_run is None)


def test_every_block_either_runs_or_says_why_not():
    found = blocks()
    assert {b.key for b in found if b.not_run is not None} == NOT_RUN
    assert all(b.not_run and len(b.not_run) > 10 for b in found if b.not_run)
    assert set(RUN) == set(EXPECT), "a new README block needs its expected output here"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    server = start_serve(tmp_path_factory.mktemp("serve"))
    try:
        yield server
    finally:
        server.stop()


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that records what was posted where."""

    posts: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).posts.append(self.path)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[str]]]:
    _Collector.posts = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", _Collector.posts
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def env(**extra: str) -> dict[str, str]:
    return {**ENV, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


@pytest.mark.parametrize("key", RUN)
def test_the_block_runs_as_written(key, served, collector, tmp_path):
    block = next(b for b in blocks() if b.key == key)
    if block.language == "python":
        endpoint, posts = collector
        code = block.code.replace("http://127.0.0.1:8000/mcp", served.url)
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            cwd=tmp_path,
            env=env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint),
        )
        if "OTLPSpanExporter" in code:
            assert "/v1/traces" in posts and "/v1/metrics" in posts, posts
    else:
        assert (BIN / "freshcache").exists(), "the freshcache command is not installed"
        done = subprocess.run(
            ["bash", "-c", adapt_bash(block.code)],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            cwd=tmp_path,
            env=env(),
        )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{key} exited {done.returncode}:\n{out}"
    # The command line never prints a traceback. (A python block's stderr may: the
    # official SDK client logs "Error parsing SSE message" with one when a frame
    # arrives while it shuts down.)
    assert "Traceback" not in (out if block.language == "bash" else done.stdout), out
    for wanted in EXPECT[key]:
        assert wanted in out, f"{key} did not print {wanted!r}:\n{out}"


WAIT_PORT = """wait_port() { python - "$1" <<'PY'
import socket, sys, time
deadline = time.monotonic() + 60
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"nothing listens on port {sys.argv[1]} after 60 s")
        time.sleep(0.05)
PY
}"""
"""A bash function: poll until a server listens on the port (a deadline, no bare sleep)."""


def adapt_bash(code: str) -> str:
    """The block with free ports, a wait after each server started in the background,
    and a trap that stops what the block left running."""
    ports: dict[str, int] = {}

    def port(literal: str) -> int:
        return ports.setdefault(literal, free_port())

    lines = [
        "set -euo pipefail",
        "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT",
        WAIT_PORT,
    ]
    for line in code.splitlines():
        line = re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{port(m.group(1))}", line)
        line = re.sub(r"--port (\d+)", lambda m: f"--port {port(m.group(1))}", line)
        started = re.match(r"freshcache serve\b[^&]*&(?!&)", line)
        if started and "--port" not in line:
            line = line.replace("freshcache serve", f"freshcache serve --port {port('8000')}", 1)
        lines.append(line)
        if started:
            served_port = re.search(r"--port (\d+)", line)
            assert served_port
            lines.append(f"wait_port {served_port.group(1)}")
    return "\n".join(lines) + "\n"


def normalized(text: str) -> set[str]:
    return {
        re.sub(r"(request\.id=|subscription_id=|attempt=)\d+", r"\1N", line.rstrip())
        for line in text.splitlines()
        if line.strip()
    }


def test_the_trace_excerpt_is_what_the_example_prints():
    pages = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    excerpt = re.search(r"python examples/trace_seed8\.py.*?```text\n(.*?)```", pages, re.S)
    assert excerpt, "the README and docs/ lost the seed-8 trace"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "trace_seed8.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env(),
    )
    shown, printed = normalized(excerpt.group(1)), normalized(done.stdout)
    assert printed <= shown, f"the run printed lines the README does not show: {printed - shown}"
    # Re-listens that fail while the server is down: how many depends on the machine.
    retries = {line for line in shown if "ConnectError" in line}
    assert shown - retries <= printed, f"the README shows lines no run printed: {shown - printed}"


def _synopsis() -> dict[str, str]:
    """The command-line synopsis (docs/cli.md), each command's lines joined (``""``: the
    line of options before COMMAND)."""
    section = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split("# Command line\n", 1)[1]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    lines: dict[str, str] = {}
    name = ""
    for line in block.splitlines():
        if line.startswith("freshcache "):
            word = line.split()[1]
            name = "" if word.startswith("[") else word
        lines[name] = lines.get(name, "") + " " + line
    return lines


def test_the_command_line_synopsis_names_every_command_and_option_the_parser_has():
    import argparse

    from freshcache._cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {"": parser, **commands.choices}
    synopsis = _synopsis()
    assert set(synopsis) == set(parsers)
    named = {
        name: set(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", text)) for name, text in synopsis.items()
    }
    missing = [
        f"{name or 'freshcache'} {action.option_strings[-1]}"
        for name, command in parsers.items()
        for action in command._actions
        if action.option_strings and action.dest != "help"
        if not named[name] & set(action.option_strings)
    ]
    assert missing == []
