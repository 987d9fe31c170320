"""The driver protocol (docs/driver-protocol.md): the tables played through a client
under test, driven in its own process, against the reference server over HTTP and
stdio; and the judging of clients that answer without states."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from xml.etree import ElementTree

import anyio
import pytest

from freshcache._core import ReadResult
from freshcache.acceptance._client_world import (
    ClientHttpWorld,
    ClientStdioWorld,
    client_unplayable,
)
from freshcache.acceptance._driver import DriverError, DriverProcess, Hello
from freshcache.acceptance._format import parse_text
from freshcache.acceptance._runner import Said, check
from freshcache.acceptance._steps import parse_expect, text_for
from freshcache.acceptance.drivers import Unavailable, command_for
from tests.typescript_support import typescript_ready

pytestmark = pytest.mark.wire

SELECTED = "guide://shipping/approval"


def acceptance(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "freshcache._cli", "acceptance", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def played(*args: str) -> dict:
    done = acceptance(*args, "--json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def only(*ids: str) -> list[str]:
    return [arg for row in ids for arg in ("--only", row)]


# One row per table (each kind of step: invalidation, TTL on the moved clock, lists,
# stream loss, faults, seams, acknowledgments), plus status and background reads, and
# a read while the server is down (on stdio: sent to processes that exit unanswering).
SAMPLE = (
    "seed-1",
    "seed-2",
    "seed-4",
    "seed-8",
    "single-flight-reread-joins",
    "ttl-expired-read",
    "list-expired-refetched",
    "stream-drop-rereads",
    "seed-5",
    "first-ack-copy-not-fresh",
    "stale-not-for-other-pattern",
)


@pytest.mark.parametrize("wire", ["http", "stdio", "http-2025", "stdio-2025"])
def test_the_freshcache_driver_passes_every_row_it_is_given_through_the_real_cli(wire):
    report = played("--client", "freshcache", "--wire", wire, *only(*SAMPLE))
    assert report["client_version"].startswith("freshcache ")
    cases = report["cases"]
    assert sorted(c["id"] for c in cases) == sorted(SAMPLE)
    failed = [(c["id"], c["failures"]) for c in cases if not c["passed"]]
    assert not failed
    assert all(c["wire"] == f"{wire}:freshcache" for c in cases)


def test_a_driver_command_of_ones_own_is_played_the_same_way():
    command = " ".join(command_for("freshcache"))
    report = played("--client-cmd", command, "--wire", "http", *only("seed-2", "seed-6"))
    assert [c["passed"] for c in report["cases"]] == [True, True]


def test_a_denial_of_another_principal_is_not_played_through_a_driver_on_stdio():
    # A stdio process serves one authorization context: "server denies X to bob" is not
    # sent, so the row cannot be played there, through a driver as on the stdio wire
    # (before: played, and freshcache failed it, "state is fresh, expected denied").
    rows = ("denied-principal-gets-no-public-copy", "denied-principal-own-read-ends-it")
    command = " ".join(command_for("freshcache"))
    verdicts = {
        (wire, c["id"]): c
        for wire in ("stdio", "http")
        for c in played("--client-cmd", command, "--wire", wire, *only(*rows))["cases"]
    }
    for row in rows:
        assert "one authorization context" in verdicts["stdio", row]["skipped"]
        assert verdicts["http", row]["passed"], verdicts["http", row]


def test_junit_with_a_client_has_one_testsuite_per_client_wire(tmp_path):
    junit = tmp_path / "client.xml"
    done = acceptance(
        "--client", "freshcache", "--wire", "all", *only("seed-2"), "--junit", str(junit)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    suites = ElementTree.parse(junit).getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == [
        f"{wire}:freshcache" for wire in ("http", "stdio", "http-2025", "stdio-2025")
    ]
    for suite in suites:
        assert [c.get("name") for c in suite.findall("testcase")] == ["seed-2"]
        assert (suite.get("tests"), suite.get("failures")) == ("1", "0")


def test_rows_a_client_cannot_be_driven_through_are_listed_with_the_reason(mcp_cases):
    # seed-1 looks without I/O (status); mcp.Client has no such look. On 2025-11-25
    # too: mcp.Client negotiates the older revision, and its driver says so.
    assert "status" in _on(mcp_cases, "seed-1")["skipped"]
    assert _on(mcp_cases, "seed-2")["skipped"] is None


def verdicts_for(name: str, rows: tuple[str, ...]) -> list[dict]:
    """Every row played through a peer gets a verdict: passed, failed as measured, or
    skipped with a reason; never a crash of the harness or the driver."""
    report = played("--client", name, "--wire", "all", *only(*rows))
    cases = report["cases"]
    assert len(cases) == 4 * len(rows)  # http, stdio, and both on 2025-11-25
    for case in cases:
        assert case["skipped"] or case["actual"] != "-", case
        assert not any("crashed" in f or "driver" in f for f in case["failures"]), case
    return cases


PEER_ROWS = (
    "seed-2",
    "seed-3",
    "seed-4",
    "seed-6",
    "seed-8",
    "ttl-expired-read",
    "not-cached-read",
)


MCP_WIRES = ("http", "stdio", "http-2025", "stdio-2025")


GRADED_ROWS = ("seed-2", "seed-4", "not-cached-read")
"""The peer rows whose verdict for the official SDK client is a stable fact (the test
below); the other peer rows only have to get one (`VERDICT_ONLY_ROWS`)."""

VERDICT_ONLY_ROWS = tuple(row for row in PEER_ROWS if row not in GRADED_ROWS)


def mcp_verdicts(wire: str, rows: tuple[str, ...]) -> list[dict]:
    """``rows`` played through the official SDK client on ``wire``, in one run of the
    harness; each gets a verdict, never a crash of the harness or the driver."""
    pytest.importorskip("mcp")
    report = played("--client", "mcp", "--wire", wire, *only(*rows))
    cases = report["cases"]
    assert sorted(c["id"] for c in cases) == sorted(rows)
    for case in cases:
        assert case["wire"] == f"{wire}:mcp", case
        assert case["skipped"] or case["actual"] != "-", case
        assert not any("crashed" in f or "driver" in f for f in case["failures"]), case
    return cases


@pytest.fixture(scope="module", params=MCP_WIRES)
def mcp_cases(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> list[dict]:
    """The rows the official SDK client is graded on here, on one wire, in one run of
    the harness: the driver (and the SDK's import) starts once per wire, and pytest
    runs the tests of a wire together. The graded peer rows, ``seed-1`` and the no-listen row on every wire; the list and
    catalog rows on the 2026-07-28 wires. The other peer rows play in a run of their
    own (`test_the_official_python_sdk_client_gets_a_verdict_on_the_other_peer_rows`),
    beside this one: a row of those whose server goes down sits out the harness's
    deadlines for a client that never comes back where its driver cannot say so
    (seed-8 on the 2025-11-25 wires: 15 s a wire).

    Played once per test session: under xdist a worker that gets a test of a wire
    another worker is playing (the tests of a wire came in two of its batches) reads
    that worker's result when it is written, instead of playing the wire again."""
    wire = request.param
    rows = (*GRADED_ROWS, "seed-1", NO_LISTEN_ROW)
    if "-2025" not in wire:
        rows += ("list-expired-refetched", "catalog-stream-drop-relisted")
    base = tmp_path_factory.getbasetemp()  # under xdist, its parent is this session's
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "mcp-cases"
    shared.mkdir(exist_ok=True)
    result = shared / f"{wire}.json"
    with (shared / f"{wire}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result.exists():
            result.write_text(json.dumps(mcp_verdicts(wire, rows)))
    cases: list[dict] = json.loads(result.read_text())
    return cases


@pytest.mark.parametrize("wire", MCP_WIRES)
def test_the_official_python_sdk_client_gets_a_verdict_on_the_other_peer_rows(wire):
    cases = mcp_verdicts(wire, VERDICT_ONLY_ROWS)
    if "-2025" not in wire:
        # Its client cannot come back once the server went down (on HTTP its context
        # ends, on stdio its session closes); the driver says so and the harness stops
        # waiting for its listen: no three settles of 5 s or more each are sat out.
        assert _on(cases, "seed-8")["seconds"] < 15, _on(cases, "seed-8")


def _on(cases: list[dict], row: str) -> dict:
    (case,) = (c for c in cases if c["id"] == row)
    return case


def test_the_official_python_sdk_client_gets_a_verdict_for_every_row(mcp_cases):
    # Stable facts about mcp.Client's cache: it serves what the server changed and
    # notified (seed-2), it withholds a read that timed out (seed-4), and a first read
    # goes to the server, which the harness sees on both wires (not-cached-read).
    # Graded on 2025-11-25 as well (resources/subscribe): a notified change is served.
    wire = mcp_cases[0]["wire"]
    passed = {c["id"] for c in mcp_cases if c["passed"] and not c["skipped"]}
    expected = {"seed-2"} if "-2025" in wire else {"seed-2", "seed-4", "not-cached-read"}
    assert expected <= passed, (wire, passed)


@pytest.mark.parametrize("mcp_cases", ["http", "stdio"], indirect=True)
def test_a_list_the_server_answered_is_a_server_read_for_a_driver_that_does_not_say(mcp_cases):
    """The harness sees a list's server read in the list pages the server answered:
    mcp.Client's driver reports no ``server_read``, and its list past the list's
    ``ttlMs`` (moved clock) goes to the server, on both wires."""
    assert _on(mcp_cases, "list-expired-refetched")["passed"]


NO_LISTEN_ROW = "no-listen-unselected-ttl"
"""A server without listen: a driver that asked again every 50 ms kept the stdio
server busy, so the row never settled and hung for its whole deadline (40 s)."""


def test_the_official_python_sdk_client_finishes_a_row_whose_server_has_no_listen(mcp_cases):
    case = _on(mcp_cases, NO_LISTEN_ROW)
    assert case["passed"], case
    assert case["seconds"] < 20, case  # settled, not cut at the row's deadline


def test_fastmcp_client_gets_a_verdict_for_every_row():
    pytest.importorskip("fastmcp")
    verdicts_for("fastmcp", PEER_ROWS)


def test_the_typescript_sdk_client_gets_a_verdict_for_every_row():
    reason = typescript_ready()
    if reason is not None:
        pytest.skip(reason)
    cases = verdicts_for("typescript", ("seed-2", "seed-4", "seed-6", NO_LISTEN_ROW))
    for case in cases:
        if case["id"] == NO_LISTEN_ROW and not case["skipped"]:
            assert case["passed"] and case["seconds"] < 20, case


def test_an_ended_notice_is_news_about_the_open_row_and_answers_nothing(tmp_path):
    """A line without an id, ``{"ended": "why"}``: the harness records it for the row
    open now (its settles stop waiting for that client) and forgets it at the next
    ``open``; the answers around it still reach their requests."""
    script = tmp_path / "driver.py"
    script.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n"
        "    if req['op'] == 'hello':\n"
        "        print(json.dumps({'id': req['id'], 'protocol': 1, 'client': 'fake 1'}))\n"
        "    elif req['op'] == 'read':\n"
        "        print(json.dumps({'ended': 'its session closed'}))\n"
        "        print(json.dumps({'id': req['id'], 'error': 'closed'}))\n"
        "    else:\n"
        "        print(json.dumps({'id': req['id'], 'ok': True}))\n"
        "    sys.stdout.flush()\n"
    )

    async def main() -> list[object]:
        seen: list[object] = []
        async with DriverProcess([sys.executable, str(script)], log=tmp_path / "log") as driver:
            await driver.ensure_started()
            await driver.request("open", wait=30.0)
            seen.append(driver.client_ended)
            seen.append(await driver.request("read", wait=30.0, uri=SELECTED))
            seen.append(driver.client_ended)
            await driver.request("open", wait=30.0)
            seen.append(driver.client_ended)
        return seen

    before, answer, ended, next_row = anyio.run(main)
    assert (before, ended, next_row) == (None, "its session closed", None)
    assert answer == {"id": 3, "error": "closed"}


# ---------------------------------------------------------------- judging without states


def expect(*phrases: str):
    return [parse_expect(p) for p in phrases]


class _NoView:
    stream_status = "unknown"
    engine = None


def test_old_text_cited_where_the_row_expects_awaiting_fails():
    cited = Said(SELECTED, text_for(SELECTED, "v1"))
    failures = check(expect("awaiting_fresh_source (invalidated)"), cited, _NoView(), 0)
    assert failures == ["cited v1 where the row expects awaiting_fresh_source"]


def test_an_error_is_withheld_and_satisfies_every_state_without_text():
    withheld = Said(SELECTED, None, "timed out")
    for phrase in ("awaiting_fresh_source (timeout)", "denied", "not_found"):
        assert check(expect(phrase), withheld, _NoView(), 0) == []
    assert check(expect("fresh v2"), withheld, _NoView(), 0) == ["withheld, expected fresh v2"]


def test_cited_text_is_judged_on_its_version_and_is_never_stale():
    v2 = Said(SELECTED, text_for(SELECTED, "v2"))
    assert check(expect("fresh v2"), v2, _NoView(), 0) == []
    assert check(expect("fresh v3"), v2, _NoView(), 0) == ["cited v2, expected fresh v3"]
    assert check(expect("stale v2"), v2, _NoView(), 0) == ["cited v2 as current, expected stale v2"]


def test_a_client_with_states_is_judged_as_freshcache_is():
    result = ReadResult("awaiting_fresh_source", SELECTED, reason="timeout")
    assert check(expect("awaiting_fresh_source (expired)"), result, _NoView(), 0) == [
        "reason is timeout, expected expired"
    ]


def test_what_a_client_lacks_is_a_stated_reason_for_each_kind_of_row():
    bare = Hello("bare 1", states=False, transports=("http",), ops=frozenset({"read"}))
    rows = parse_text(
        "| id | source | steps | expect |\n|---|---|---|---|\n"
        "| a | t | time passes 61s; read selected | fresh v1 |\n"
        "| b | t | read selected as bob | fresh v1 |\n"
        "| c | t | given policy subscription-backed; read selected | fresh v1 |\n"
        "| d | t | read selected | fresh v1; stream lost |\n"
        "| e | t | read selected | fresh v1 |\n"
        "| f | t | call tool help | call answered |\n",
        "inline.md",
    )[0]
    reasons = {case.id: client_unplayable(case, bare, "http") for case in rows}
    assert "tool" in reasons["f"]  # no driver has a tool-call op (table 14)
    assert "clock" in reasons["a"]
    assert "principal" in reasons["b"]
    assert "subscription_backed" in reasons["c"]
    assert "stream" in reasons["d"]
    assert reasons["e"] is None
    assert "stdio" in str(client_unplayable(rows[4], bare, "stdio"))


def test_a_client_that_names_no_2025_revision_has_every_row_listed_on_the_2025_wires():
    rows = parse_text(
        "| id | source | steps | expect |\n|---|---|---|---|\n"
        "| a | t | read selected | fresh v1 |\n"
        "| b | t | time passes 61s; read selected | fresh v1 |\n",
        "inline.md",
    )[0]
    modern = Hello("modern 1", states=False, transports=("http", "stdio"), ops=frozenset({"read"}))
    both = Hello(
        "both 1",
        states=False,
        transports=("http", "stdio"),
        ops=frozenset({"read"}),
        revisions=frozenset({"2026-07-28", "2025-11-25"}),
    )
    for world in (ClientHttpWorld, ClientStdioWorld):
        on_2025 = world(None, modern, revision="2025-11-25")  # type: ignore[arg-type]
        assert on_2025.name.endswith("-2025:modern")
        for row in rows:
            assert "names no MCP 2025-11-25" in str(on_2025.unplayable(row))
        # A client that speaks it is judged on each row, as on 2026-07-28.
        played = world(None, both, revision="2025-11-25")  # type: ignore[arg-type]
        assert played.unplayable(rows[0]) is None
        assert "advance" in str(played.unplayable(rows[1]))
    assert ClientHttpWorld(None, modern).unplayable(rows[0]) is None  # type: ignore[arg-type]


def test_a_driver_of_another_protocol_version_is_refused():
    with pytest.raises(DriverError, match="protocol 2"):
        Hello.parse({"protocol": 2, "client": "future"})


def test_user_mistakes_are_one_line_and_exit_2():
    unknown = acceptance("--client", "nosuch", "--only", "seed-2", timeout=60)
    assert unknown.returncode == 2
    assert (
        unknown.stderr.strip().count("\n") == 0 and "no shipped driver 'nosuch'" in unknown.stderr
    )
    dead = acceptance("--client-cmd", "false", "--wire", "http", "--only", "seed-2", timeout=60)
    assert dead.returncode == 2
    assert "Traceback" not in dead.stderr and "driver" in dead.stderr
    core = acceptance("--client", "freshcache", "--wire", "core", "--only", "seed-2", timeout=60)
    assert core.returncode == 2 and "plays no client" in core.stderr


@pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="needs mcp")
def test_shipped_python_drivers_start_with_this_interpreter():
    assert command_for("mcp")[:2] == [sys.executable, "-m"]


def _fake_npm(folder, exit_code: int) -> None:
    """An ``npm`` on PATH that does what ``npm ci --prefix DIR`` leaves behind."""
    npm = folder / "npm"
    npm.write_text(
        "#!/bin/sh\n"
        'prefix=""; while [ $# -gt 0 ]; do [ "$1" = --prefix ] && prefix="$2"; shift; done\n'
        f"[ {exit_code} -ne 0 ] && {{ echo 'npm ERR! offline' >&2; exit {exit_code}; }}\n"
        'mkdir -p "$prefix/node_modules/@modelcontextprotocol/client"\n'
    )
    npm.chmod(0o755)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node on PATH")
def test_the_typescript_sdk_is_installed_on_first_use_with_one_line(tmp_path, monkeypatch):
    from freshcache.acceptance import drivers

    bin_dir, home = tmp_path / "bin", tmp_path / "drivers"
    bin_dir.mkdir()
    (home / "typescript").mkdir(parents=True)
    _fake_npm(bin_dir, 0)
    monkeypatch.setattr(drivers, "HERE", home)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    said: list[str] = []
    drivers.prepare("typescript", said.append)
    assert said == [
        "installing the TypeScript SDK for --client typescript, once: "
        f"npm ci --prefix {home / 'typescript'}"
    ]
    assert drivers.command_for("typescript")[1] == str(home / "typescript" / "driver.mjs")
    drivers.prepare("typescript", said.append)  # installed: nothing to do, nothing said
    assert len(said) == 1


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node on PATH")
def test_a_failed_sdk_install_is_unavailable_with_npms_words(tmp_path, monkeypatch):
    from freshcache.acceptance import drivers

    bin_dir, home = tmp_path / "bin", tmp_path / "drivers"
    bin_dir.mkdir()
    (home / "typescript").mkdir(parents=True)
    _fake_npm(bin_dir, 7)
    monkeypatch.setattr(drivers, "HERE", home)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(Unavailable, match=r"failed \(exit 7\): npm ERR! offline"):
        drivers.prepare("typescript", lambda line: None)


@pytest.mark.parametrize("mcp_cases", ["http", "stdio"], indirect=True)
def test_the_official_python_sdk_client_keeps_the_tool_list_it_had_before_a_reconnect(mcp_cases):
    """Issue 26: after a reconnect the official SDK client hands out the tool list it
    had before (nothing tells it to list again), where freshcache lists again because a
    new stream proves nothing about the time before it (invariant 4; next test)."""
    sdk = _on(mcp_cases, "catalog-stream-drop-relisted")
    assert not sdk["passed"]
    assert sdk["actual"] == "cited v1"  # the list from before the reconnect


def test_freshcache_lists_again_after_a_reconnect_where_the_sdk_client_does_not():
    (ours,) = played(
        "--client", "freshcache", "--wire", "http", *only("catalog-stream-drop-relisted")
    )["cases"]
    assert ours["passed"], ours
