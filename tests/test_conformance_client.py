"""The official MCP conformance client scenarios, played against freshcache.

``@modelcontextprotocol/conformance`` (pinned in tests/fixtures/conformance/) runs a
test server per scenario and judges the client under test,
tests/fixtures/conformance_client.py (freshcache's public API), by what reaches it.
Two runs of the suite, one per revision (``--suite all --spec-version 2026-07-28``
and ``2025-11-25``), go side by side in one module fixture: each is one Node process
running its scenarios in parallel. Every scenario either applies (its item here must
pass: every check ``SUCCESS``, at least one, and the client finished), or is named in
`NOT_APPLICABLE` with the reason (its item asserts the client refused it and sent
nothing). A scenario the suite runs that is in neither list fails: a new version of
the suite brings new rules to decide on. docs/conformance.md has the table and the
command to rerun it by hand.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from tests.conformance_support import ConformanceUnavailable, conformance_cli
from tests.polling import scaled

# The first item's setup installs the suite (npm ci, at most 300 s) and plays both runs
# (at most RUN_TIMEOUT): more than the suite-wide 120 s a test may take.
pytestmark = [pytest.mark.wire, pytest.mark.timeout(480)]

CLIENT = Path(__file__).parent / "fixtures" / "conformance_client.py"
REVISIONS = ("2026-07-28", "2025-11-25")
RUN_TIMEOUT = 110.0

APPLIES: dict[str, tuple[str, ...]] = {
    "2026-07-28": (
        "tools_call",
        "request-metadata",
        "http-standard-headers",
        "http-custom-headers",
        "http-invalid-tool-headers",
        "json-schema-ref-no-deref",
        "json-schema-2020-12-preservation",
        "sep-2322-client-request-state",
    ),
    "2025-11-25": (
        "tools_call",
        "json-schema-2020-12-preservation",
        "sse-retry",
    ),
}
"""The scenarios that apply to freshcache, per revision: each must pass."""

NO_OAUTH = (
    "freshcache has no OAuth flow of its own: HttpSource takes each principal's "
    "credentials from auth= (principal -> headers); discovering an authorization server "
    "and getting a token is the application's (or its OAuth library's) job"
)
NOT_APPLICABLE: dict[str, str] = {
    "auth/*": NO_OAUTH,
    "elicitation-sep1034-client-defaults": (
        "freshcache declares no elicitation capability: a cache has no user to ask, and "
        "the server is told so (clientCapabilities {}), so it never elicits"
    ),
    "initialize": (
        "freshcache finds the server's era itself (2026-07-28 streamable-http, Backward "
        "Compatibility: a modern request first, initialize only after a 400 that is not a "
        "modern error); this scenario's server answers server/discover with 200 and an "
        "empty result, so no initialize is due. freshcache's initialize is played against "
        "the 2025-11-25 reference server and SDK 1.x servers elsewhere in the suite, and "
        "against this suite's own 2025-11-25 server in tools_call and "
        "json-schema-2020-12-preservation here"
    ),
}
"""Scenarios that do not apply, with the reason (``auth/*``: every ``auth/`` one). The
suite skips extension scenarios (``sep-2640-*`` skills, ``auth/client-credentials-*``,
``auth/dpop*``, ``auth/wif-*``, ``auth/enterprise-*``) under ``--spec-version``; they are
listed in docs/conformance.md."""

XFAIL: dict[tuple[str, str], str] = {}
"""Scenarios that apply and fail today, with what they need (strict: a pass fails)."""


def not_applicable(scenario: str) -> str | None:
    """Why ``scenario`` does not apply, or ``None``."""
    if scenario.startswith("auth/"):
        return NOT_APPLICABLE["auth/*"]
    return NOT_APPLICABLE.get(scenario)


@dataclass
class Played:
    """One scenario's result: the suite's checks and the client's output."""

    checks: list[dict[str, object]] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""


@dataclass
class Run:
    """One run of the suite at one revision."""

    revision: str
    played: dict[str, Played]
    log: str


@contextmanager
def zygote(socket: Path) -> Iterator[Path | None]:
    """The client's zygote (tests/fixtures/conformance_client.py): freshcache imported
    once, a process forked per scenario. ``None`` where there is no ``fork``."""
    if not hasattr(os, "fork") or len(str(socket)) > 100:  # AF_UNIX paths are short
        yield None
        return
    process = subprocess.Popen(
        [sys.executable, str(CLIENT), "--zygote", str(socket)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready.strip() == b"ready", f"the zygote did not start: {ready!r}"
        yield socket
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def play(node: Path, entry: Path, revision: str, out: Path, zygote: Path | None) -> Run:
    if " " in sys.executable or " " in str(CLIENT):
        pytest.skip(f"the suite splits --command on spaces: {sys.executable} {CLIENT}")
    command = f"{sys.executable} {CLIENT}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    if zygote is not None:
        env["FRESHCACHE_CONFORMANCE_ZYGOTE"] = str(zygote)
    done = subprocess.run(
        [
            str(node),
            str(entry),
            "client",
            "--command",
            command,
            "--suite",
            "all",
            "--spec-version",
            revision,
            "--timeout",
            "60000",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=scaled(RUN_TIMEOUT),
        check=False,
        env=env,
    )
    played: dict[str, Played] = {}
    for checks in out.rglob("checks.json"):
        folder = checks.parent
        name = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", folder.relative_to(out).as_posix())
        played[name] = Played(
            json.loads(checks.read_text()),
            (folder / "stdout.txt").read_text(),
            (folder / "stderr.txt").read_text(),
        )
    return Run(revision, played, done.stdout + done.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Both runs, once per test session: under xdist the first worker to get here plays
    them (the others wait on a lock in the shared temporary directory) and every worker
    reads the same results."""
    try:
        node, entry = conformance_cli()
    except ConformanceUnavailable as exc:
        pytest.skip(f"no conformance suite: {exc}")
    base = tmp_path_factory.getbasetemp()  # under xdist, its parent is this session's
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "conformance"
    shared.mkdir(exist_ok=True)
    results = shared / "results.json"
    with _locked(shared / "lock"):
        if not results.exists():
            with zygote(shared / "zygote.sock") as socket, ThreadPoolExecutor(2) as pool:
                futures = {
                    r: pool.submit(play, node, entry, r, shared / r, socket) for r in REVISIONS
                }
                played = {r: asdict(future.result()) for r, future in futures.items()}
            results.write_text(json.dumps(played))
    loaded = json.loads(results.read_text())
    return {
        revision: Run(
            revision,
            {name: Played(**p) for name, p in run["played"].items()},
            run["log"],
        )
        for revision, run in loaded.items()
    }


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        try:
            import fcntl
        except ImportError:  # no POSIX locks: each worker plays its own runs
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def judge(run: Run, scenario: str) -> None:
    played = run.played.get(scenario)
    assert played is not None, (
        f"the suite did not run {scenario} at {run.revision}:\n{run.log[-2000:]}"
    )
    bad = [c for c in played.checks if c.get("status") in ("FAILURE", "WARNING")]
    passed = [c for c in played.checks if c.get("status") == "SUCCESS"]
    story = f"client stdout:\n{played.stdout}\nclient stderr:\n{played.stderr[-3000:]}"
    assert not bad, (
        "\n".join(f"{c['status']} {c['id']}: {c.get('errorMessage')}" for c in bad) + "\n" + story
    )
    assert passed, f"no check passed: the scenario was not exercised\n{story}"
    assert f"done: {scenario}" in played.stdout, story


def items(revision: str) -> list[object]:
    out: list[object] = []
    for scenario in APPLIES[revision]:
        why = XFAIL.get((revision, scenario))
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(scenario, marks=marks, id=scenario))
    return out


@pytest.mark.parametrize("scenario", items("2026-07-28"))
def test_2026_client_scenario(runs: dict[str, Run], scenario: str) -> None:
    judge(runs["2026-07-28"], scenario)


@pytest.mark.parametrize("scenario", items("2025-11-25"))
def test_2025_client_scenario(runs: dict[str, Run], scenario: str) -> None:
    judge(runs["2025-11-25"], scenario)


@pytest.mark.parametrize("revision", REVISIONS)
def test_every_other_scenario_is_not_applicable_for_a_stated_reason(
    runs: dict[str, Run], revision: str
) -> None:
    """What the suite runs beyond `APPLIES` is named in `NOT_APPLICABLE`, and the client
    refused it without a request (a new scenario fails here until it is decided)."""
    run = runs[revision]
    assert run.played, f"the suite ran nothing at {revision}:\n{run.log[-2000:]}"
    undecided = sorted(
        s for s in run.played if s not in APPLIES[revision] and not_applicable(s) is None
    )
    assert not undecided, f"scenarios neither applicable nor not applicable: {undecided}"
    for scenario, played in run.played.items():
        if scenario not in APPLIES[revision]:
            assert f"not applicable: {scenario}" in played.stdout, (scenario, played.stdout)
