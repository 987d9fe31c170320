"""The examples run as written against the official-SDK fixture server."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import SdkServer
from tests.polling import scaled

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
APPROVAL = "guide://shipping/approval"
RETURNS = "guide://shipping/returns"
V1 = "Shipping approval v1: orders over $500 need a manager."
V2 = "Shipping approval v2: orders over $800 need a manager."
RETURNS_TEXT = "Returns v1: 30 days."


@dataclass
class Turn:
    number: int
    states: dict[str, dict[str, str]] = field(default_factory=dict)
    prompt: str = ""


class AgentLoop:
    """`examples/agent_loop.py` in a subprocess: one stdin line per turn."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "agent_loop.py"), url, "--wait", "0.3"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.turns: list[Turn] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        assert self.next_line().startswith("ready:")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self, timeout: float = 60.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the example printed nothing for {timeout}s") from None

    def turn(self) -> Turn:
        assert self.process.stdin is not None
        self.process.stdin.write("Who must approve a $600 order?\n")
        self.process.stdin.flush()
        header = self.next_line()
        assert header.startswith("turn "), header
        current = Turn(int(header.split()[1]))
        while True:
            line = self.next_line()
            if line.startswith("prompt "):
                current.prompt = json.loads(line[len("prompt ") :])
                self.turns.append(current)
                return current
            _, uri, state, *fields = line.split(" ", 5)
            current.states[uri] = {"state": state} | dict(
                f.split("=", 1) for f in fields if "=" in f
            )

    def turn_until(self, wanted, what: str, timeout: float = 15.0) -> Turn:
        """Take turns (bounded, the bound stretched by the machine's load) until one shows
        what the test waits for."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            current = self.turn()
            if wanted(current):
                return current
            assert time.monotonic() < deadline, f"no turn showed {what}; last: {current.states}"
            time.sleep(0.05)

    def finish(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=20)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.reader.join(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


def state_of(uri: str):
    return lambda t: t.states[uri]["state"]


@pytest.mark.wire
def test_the_agent_loop_never_puts_stale_text_in_its_prompt(sdk_server: SdkServer):
    agent = AgentLoop(sdk_server.url)
    try:
        # The first turn may end before the first read does on a loaded machine: the
        # agent is then told it is awaiting (never handed old text); it asks again.
        first = agent.turn()
        if first.states[APPROVAL]["state"] != "fresh":
            assert V1 not in first.prompt
            first = agent.turn_until(lambda t: state_of(APPROVAL)(t) == "fresh", "fresh v1")
        assert V1 in first.prompt
        assert RETURNS_TEXT in first.prompt

        # The approval rule changes; the re-read is slow: the agent sees awaiting, not v1.
        sdk_server.control("slow", uri=APPROVAL, ms=1500)
        sdk_server.control("set", uri=APPROVAL, text=V2)
        waiting = agent.turn_until(
            lambda t: state_of(APPROVAL)(t) == "awaiting_fresh_source", "awaiting after the change"
        )
        sdk_server.control("slow", uri=APPROVAL, ms=0)
        fresh_again = agent.turn_until(
            lambda t: V2 in t.prompt and state_of(APPROVAL)(t) == "fresh", "fresh v2"
        )
        assert fresh_again.states[APPROVAL]["version"] != first.states[APPROVAL]["version"]

        # The returns policy is withdrawn from this user.
        sdk_server.control("deny", uri=RETURNS)
        sdk_server.control("notify", uri=RETURNS)
        denied = agent.turn_until(lambda t: state_of(RETURNS)(t) == "denied", "denied")
        assert RETURNS_TEXT not in denied.prompt
        assert "Do not cite it" in denied.prompt

        # The server dies: nothing it said before may be quoted as current.
        os.kill(sdk_server.process.pid, signal.SIGKILL)
        sdk_server.process.wait(timeout=10)
        dead = agent.turn_until(
            lambda t: state_of(APPROVAL)(t) == "awaiting_fresh_source", "awaiting after the death"
        )
        assert dead.states[APPROVAL]["reason"] in ("stream_lost", "unreachable")
        assert V2 not in dead.prompt
        assert agent.finish() == 0
    finally:
        agent.stop()

    assert waiting.states[APPROVAL]["reason"] in ("timeout", "invalidated")
    seen_v2 = False
    for turn in agent.turns:
        approval = turn.states[APPROVAL]
        if approval["state"] != "fresh":
            assert V1 not in turn.prompt and V2 not in turn.prompt, turn
        seen_v2 = seen_v2 or V2 in turn.prompt
        if seen_v2:
            assert V1 not in turn.prompt, f"turn {turn.number} quoted v1 after v2 was seen"
        if turn.states[RETURNS]["state"] != "fresh":
            assert RETURNS_TEXT not in turn.prompt, turn
