"""The command line against a real server: doctor, read, watch (and their errors)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from freshcache._cli import main

APPROVAL = "guide://shipping/approval"

pytestmark = pytest.mark.wire


def run_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "freshcache._cli", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def test_doctor_reports_the_honoured_filter_the_hints_and_the_update_latency(sdk_server):
    trigger = (
        f"{sys.executable} -c \"import httpx; httpx.post('{sdk_server.control_url}', "
        f"json={{'op': 'set', 'uri': '{APPROVAL}', 'text': 'v2'}})\""
    )
    done = run_cli("doctor", sdk_server.url, "--uri", APPROVAL, "--trigger", trigger)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "reachable   yes (freshcache-fixture" in out
    assert f"read        {APPROVAL}: ttlMs=60000 cacheScope=private" in out
    assert f"resourceSubscriptions=['{APPROVAL}']" in out
    assert f"update      {APPROVAL} arrived" in out


def test_doctor_says_so_when_the_server_acknowledges_no_resource(sdk_server):
    sdk_server.control("ack_exclude", uris=[APPROVAL, "guide://shipping/returns"])
    done = run_cli("doctor", sdk_server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "never acknowledges resource subscriptions" in done.stdout
    assert "read before every use" in done.stdout


def test_doctor_exits_1_for_a_server_that_is_not_there():
    from tests.conftest import free_port

    done = run_cli("doctor", f"http://127.0.0.1:{free_port()}/mcp", "--timeout", "3")
    assert done.returncode == 1
    assert "reachable   no" in done.stdout


def test_read_prints_text_only_when_fresh(sdk_server):
    done = run_cli("read", sdk_server.url, APPROVAL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Shipping approval v1: orders over $500 need a manager."
    sdk_server.control("deny", uri=APPROVAL)
    denied = run_cli("read", sdk_server.url, APPROVAL)
    assert denied.returncode == 1
    assert denied.stdout == ""
    assert f"{APPROVAL}: denied" in denied.stderr


def test_watch_prints_a_line_per_change(sdk_server):
    done = run_cli("watch", sdk_server.url, APPROVAL, "guide://nope", "--duration", "1.5")
    assert done.returncode == 0, done.stderr
    assert f"{APPROVAL}: fresh" in done.stdout
    assert "guide://nope: not_found (not_found)" in done.stdout
    assert "-- stream live" in done.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["read", "ftp://x", "u"], "neither an http(s) URL"),
        (["read", "http://127.0.0.1:1/mcp"], "read takes one URI"),
        (["watch", "http://127.0.0.1:1/mcp"], "at least one URI"),
        (["doctor", "--"], "give the command"),
    ],
    ids=["bad-url", "read-without-uri", "watch-without-uri", "empty-command"],
)
def test_user_mistakes_give_a_message_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "acceptance" in capsys.readouterr().out
