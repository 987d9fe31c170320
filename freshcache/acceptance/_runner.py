"""Plays acceptance cases against a `World`: a cache plus a server it can steer.

The runner knows nothing of transports. A `World` builds the seed situation (the
selected resource cached at v1, the stream live and acknowledged), turns each step
into server actions, and waits for the cache to settle. `EngineWorld` does this in
memory with a virtual clock; wire worlds (HTTP, stdio) put the same reference server
behind a real transport.
"""

from __future__ import annotations

import abc
import contextlib
import os
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from freshcache import (
    BackoffSettings,
    Catalog,
    FreshCache,
    ListResult,
    MemoryStore,
    Policy,
    ReadResult,
    Source,
    StateChanges,
    ToolCall,
)
from freshcache.testing import ReferenceServer

from ._format import Case
from ._mutation import mutate_everything
from ._settle import PROGRESS_ALLOWANCE, settle, wait_for
from ._steering import apply_to_reference, configure_reference
from ._steps import (
    ALIASES,
    SCHEMA_FAULTS,
    Expect,
    FleetChange,
    Given,
    NextRead,
    Notify,
    Observe,
    ReadUnselected,
    Select,
    ServerChange,
    ServerSets,
    Step,
    TimePasses,
    bulk_uri,
    catalog_version_of,
    fleet_size,
    text_for,
)
from ._timeline import RecordingSource, SlowLaterPages, Timeline, alias_of, note_changes


@dataclass(frozen=True, slots=True)
class Said:
    """What a client without explicit states handed over (the driver protocol): text it
    would cite to a model (``cited``), or an error instead (``withheld``)."""

    uri: str
    text: str | None
    error: str | None = None
    server_read: bool = False
    reason: None = None

    @property
    def state(self) -> str:
        return "withheld" if self.text is None else "cited"


Observation = ReadResult | ListResult | Catalog | ToolCall | Said

KNOWN_FAILING: dict[str, str] = {}
"""Rows that fail on the current code because of a known, open defect: row id -> the
defect. `play` reports such a row as passed while it still fails *and* as failed once
it passes (take it off this list then). The one place to mark a row known failing."""


class VirtualClock:
    """A clock that moves only when told (TTL decisions in tables are deterministic)."""

    def __init__(self, start: float = 1_000.0, wall_start: float = 1_800_000_000.0) -> None:
        self.now = start
        self._wall_offset = wall_start - start

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now + self._wall_offset

    def advance(self, seconds: float) -> None:
        self.now += seconds


def load_factor() -> float:
    """How far past its cores the machine is now (the one-minute load average per core,
    at least 1). The worlds stretch every deadline that is not the row's subject by it:
    a wait that load can exhaust grows with the load; with a core to spare it is 1."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return 1.0
    return max(1.0, per_core)


DEADLINE_ROW_SECONDS = 0.5
"""The request deadline of a row that only needs one to pass (`Setup.deadline_row`): long
enough for the reads the row does expect to succeed on a loaded loopback, short enough
that the four timeout rows cost a second each instead of six."""


@dataclass(slots=True)
class Setup:
    """The starting situation after the row's ``given`` steps."""

    listen: bool = True
    list_changed: bool = True
    ack_omits: set[str] = field(default_factory=set)
    cached: bool = True
    ttl_ms: int = 60_000
    scope: str = "private"
    policy: dict[str, Any] = field(default_factory=dict)
    selected: list[str] = field(default_factory=lambda: [ALIASES["selected"]])
    principal: str | None = None
    page_size: int = 100
    store_entries: int | None = None
    later_pages_ttl_ms: int | None = None
    acks_held: bool = False
    fleet: int | None = None
    """How many workers share one freshness view (a fleet row), else ``None``."""
    catalog_page_size: int = 100
    catalog_later_ttl_ms: int | None = None
    catalog_later_private: bool = False
    catalog_public: bool = False
    catalog_ttl_ms: int = 60_000
    list_endless: bool = False
    catalog_endless: bool = False
    later_pages_delay_ms: int = 0
    """Each list page after the first lands this long after it was asked for, on the
    clock the cache decides TTLs by (`SlowLaterPages`)."""
    deadline_row: bool = False
    """The row makes a server read go unanswered (*times out*): all it needs of the
    request deadline is that it passes, so a wire world plays it with a short one
    (`DEADLINE_ROW_SECONDS`) instead of sitting out the default."""

    @classmethod
    def for_row(cls, steps: Sequence[Step | Given]) -> Setup:
        """The setup of a row: its ``given`` steps, and whether it is a deadline row."""
        setup = cls.from_givens([s for s in steps if isinstance(s, Given)])
        setup.deadline_row = any(isinstance(s, NextRead) and s.fault == "timeout" for s in steps)
        return setup

    @classmethod
    def from_givens(cls, givens: Sequence[Given]) -> Setup:
        setup = cls()
        for given in givens:
            match given.what:
                case "no_listen":
                    setup.listen = False
                case "no_list_changed":
                    setup.list_changed = False
                case "ack_omits":
                    setup.ack_omits.add(given.arg)
                case "not_cached":
                    setup.cached = False
                case "ttl":
                    setup.ttl_ms = int(given.arg)
                case "subscription_backed":
                    setup.policy["subscription_backed"] = True
                case "ttl_for_uncovered":
                    setup.policy["uncovered"] = "ttl"
                case "stale_allowed":
                    setup.policy["stale_on_error"] = (
                        *setup.policy.get("stale_on_error", ()),
                        given.arg,
                    )
                case "public_shared":
                    setup.policy["share_public"] = True
                case "scope_public":
                    setup.scope = "public"
                case "also_selected":
                    setup.selected.append(given.arg)
                case "principal":
                    setup.principal = given.arg
                case "page_size":
                    setup.page_size = int(given.arg)
                case "store_entries":
                    setup.store_entries = int(given.arg)
                case "later_pages_ttl":
                    setup.later_pages_ttl_ms = int(given.arg)
                case "acks_held":
                    setup.acks_held = True
                case "fleet":
                    setup.fleet = int(given.arg)
                case "pushed_bodies":
                    setup.policy["pushed_bodies"] = True
                case "catalog_page_size":
                    setup.catalog_page_size = int(given.arg)
                case "catalog_later_ttl":
                    setup.catalog_later_ttl_ms = int(given.arg)
                case "catalog_later_private":
                    setup.catalog_later_private = True
                case "catalog_public":
                    setup.catalog_public = True
                case "stale_catalogs":
                    setup.policy["stale_catalogs_on_error"] = True
                case "nothing_selected":
                    setup.selected = []
                case "catalog_ttl":
                    setup.catalog_ttl_ms = int(given.arg)
                case "later_pages_delay":
                    setup.later_pages_delay_ms = int(given.arg)
                case "list_endless":
                    setup.list_endless = True
                case "catalog_endless":
                    setup.catalog_endless = True
                case "max_list_pages":
                    setup.policy["max_list_pages"] = int(given.arg)
        return setup


class World(abc.ABC):
    """A cache and a server to steer, at one level (engine, HTTP, stdio)."""

    name = "world"
    revision = "2026-07-28"
    """The MCP revision the world's server speaks (a row's ``on 2025-11-25`` column
    applies where it is ``2025-11-25``)."""
    cache: FreshCache
    clock: VirtualClock
    timeline: Timeline | None = None
    """Set by `play` before `start`: `make_cache` puts a `RecordingSource` on it."""
    tools_handed: dict[int | None, Catalog] | None = None
    """Set by `play`: the tools catalog each cache last handed the row (a ``call tool``
    step's ``seen=``)."""

    @abc.abstractmethod
    async def start(self, setup: Setup) -> None:
        """Start the server and the cache; reach the stream-live state."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop everything started."""

    @abc.abstractmethod
    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        """Make the server do what the step says."""

    plays_fleet_rows = False
    """Whether this world plays the fleet rows (and only those): `FleetWorld`."""

    def cache_for(self, worker: int | None) -> FreshCache:
        """The cache a step looks through (a fleet world has one per worker)."""
        return self.cache

    async def act_on_fleet(self, step: FleetChange) -> None:
        raise AssertionError("only a fleet world plays fleet rows (`fleet_unplayable`)")

    def fleet_counts(self) -> dict[str, int] | None:
        """The fleet's counters summed over its workers (``None``: no fleet)."""
        return None

    #: How `settle` polls: the deadline, the pause between looks, the event-loop turns
    #: before each look.
    settle_limit = 5.0
    settle_pause = 0.002
    settle_turns = 20
    #: Settles that hit their deadline, and what was still busy then.
    settle_timeouts = 0
    last_busy: str | None = None

    async def settle(self) -> None:
        """Wait (bounded) until the cache has taken in everything the server did."""
        busy = await settle(
            self._look,
            limit=self.settle_limit * load_factor(),
            pause=self.settle_pause,
            turns=self.settle_turns,
            progress=self.server_reads,
        )
        self.last_busy = busy
        if busy is not None:
            self.settle_timeouts += 1

    async def settle_start(self) -> None:
        """`settle` into the seed situation. On a loaded machine a cache may still be
        starting when one settle's limit has passed (its discovery timed out, then it
        listens): while it has had no stream up yet (``idle`` or ``opening``), look
        again, up to `PROGRESS_ALLOWANCE` limits in all. A row begun earlier would
        count the reads its acknowledgment causes (invariant 4) among its own. A start
        stuck any other way gives up after one limit, as before."""
        timeouts = self.settle_timeouts
        give_up = anyio.current_time() + PROGRESS_ALLOWANCE * self.settle_limit * load_factor()
        while True:
            await self.settle()
            if self.last_busy is None:
                self.settle_timeouts = timeouts
                return
            starting = self.observed().stream_status in ("idle", "opening")
            if not starting or anyio.current_time() >= give_up:
                self.settle_timeouts = timeouts + 1
                return

    @abc.abstractmethod
    async def _look(self) -> str | None:
        """What the cache has not taken in yet (``None``: settled)."""

    @abc.abstractmethod
    def server_reads(self) -> int:
        """Reads the server has answered so far."""

    def unplayable(self, case: Case) -> str | None:
        """Why this world cannot play ``case`` (``None`` when it can)."""
        return None

    # How the runner observes and steers the client: the in-process `FreshCache` here;
    # a world whose client lives elsewhere (`_client_world`) answers over its channel.

    async def read(
        self,
        uri: str,
        *,
        principal: str | None = None,
        timeout: float | None = None,
        worker: int | None = None,
    ) -> ReadResult | Said:
        return await self.cache_for(worker).read(uri, principal=principal, timeout=timeout)

    async def context(
        self, uri: str, also: Sequence[str], *, worker: int | None = None
    ) -> ReadResult | Said:
        """``uri``'s part of one `FreshCache.context` call for ``uri`` and ``also``."""
        context = await self.cache_for(worker).context([uri, *also], timeout=30.0)
        return next(r for r in (*context.fresh, *context.withheld) if r.uri == uri)

    async def status(
        self, uri: str, *, principal: str | None = None, worker: int | None = None
    ) -> ReadResult | Said:
        return self.cache_for(worker).status(uri, principal=principal)

    async def list_resources(self, *, worker: int | None = None) -> ListResult:
        return await self.cache_for(worker).list_resources()

    async def catalog(
        self, kind: str, *, principal: str | None = None, worker: int | None = None
    ) -> Catalog | Said:
        """One catalog as the client hands it out (``tools()``, ``prompts()`` ...)."""
        cache = self.cache_for(worker)
        match kind:
            case "tools":
                return await cache.tools(principal=principal)
            case "prompts":
                return await cache.prompts(principal=principal)
            case _:
                return await cache.resource_templates(principal=principal)

    async def catalog_status(self, kind: str, *, worker: int | None = None) -> Catalog | Said:
        return self.cache_for(worker).catalog_status(kind)

    async def call_tool(
        self, name: str, *, worker: int | None = None, says_seen: bool = True
    ) -> ToolCall:
        """One `FreshCache.call_tool` of ``name`` (no arguments), saying the tools catalog
        the row was last handed as ``seen=`` (unless ``says_seen`` is false)."""
        handed = self.tools_handed or {}
        seen = handed.get(worker) if says_seen else None
        return await self.cache_for(worker).call_tool(name, {}, seen=seen)

    def tool_calls(self) -> int | None:
        """``tools/call`` requests the server received so far (``None``: not counted)."""
        server = getattr(self, "server", None)
        return len(server.tool_calls) if isinstance(server, ReferenceServer) else None

    async def select(self, uris: Sequence[str]) -> None:
        self.cache.select(uris)

    async def advance(self, seconds: float) -> None:
        """Move the clock the client decides TTLs by."""
        self.clock.advance(seconds)

    def observed(self) -> Observed:
        """What `check` looks at besides the last observation."""
        return self.cache

    def state_changes(self) -> list[tuple[str, StateChanges]]:
        """The state-change feeds for the timeline, each with the name its lines get
        (``""`` in a world of one cache; none when there is no cache here)."""
        cache: FreshCache | None = getattr(self, "cache", None)
        return [] if cache is None else [("", cache.changes())]

    def make_cache(
        self, source: Source, setup: Setup, *, who: str = "", **options: Any
    ) -> FreshCache:
        """The cache a row is played with: the row's selection, policy, store bound and
        principal, the world's virtual clock for TTLs and a quick re-listen backoff.
        ``who`` names it on the timeline where a world has several; ``options`` override
        or add `FreshCache` arguments (timeouts, telemetry)."""
        store = (
            None if setup.store_entries is None else MemoryStore(max_entries=setup.store_entries)
        )
        arguments: dict[str, Any] = {
            "select": setup.selected,
            "policy": Policy(**setup.policy),
            "store": store,
            "principal": setup.principal,
            "read_timeout": 2.0 * load_factor(),
            "ack_timeout": 2.0 * load_factor(),
            "backoff": BackoffSettings(base=0.002, cap=0.01, quick_death=0.0),
            "clock": self.clock,
            "wall_clock": self.clock.wall,
        }
        arguments.update(options)
        if setup.later_pages_delay_ms:
            source = SlowLaterPages(source, self.clock, setup.later_pages_delay_ms / 1000)
        if self.timeline is not None:
            source = RecordingSource(source, self.timeline, who)
        return FreshCache(source, **arguments)

    async def reach_seed_situation(self, setup: Setup) -> None:
        """After the cache is entered: stream live and, unless ``given not cached``,
        the selected and the other resource read once (DESIGN §3's starting point)."""
        await self.settle_start()
        if setup.cached:
            # With acks held the selected read comes before the first ack, and waits
            # for it at most half its deadline (`FreshCache._after_ack`): a short one,
            # so the copy is read before the ack, as the rows say, and soon. A read
            # the deadline cuts short lands in the background, before `settle` ends.
            timeout = 0.4 if setup.acks_held else None
            for uri in (ALIASES["selected"], ALIASES["other"]):
                await self.read(uri, timeout=timeout)
            await self.settle()


@dataclass(slots=True)
class CaseReport:
    """What happened when one case was played."""

    id: str
    where: str
    passed: bool
    expected: str
    actual: str
    failures: list[str] = field(default_factory=list)
    skipped: str | None = None
    seconds: float = 0.0
    known_failure: str | None = None
    """For a row in `KNOWN_FAILING` that still fails: the defect and how it failed."""
    observed: str = "-"
    """The last observation in full (state, version, reason), compared or not."""
    settle_gave_up: int = 0
    """How many of the row's settles hit their deadline (a passing row may still; the
    test suite's table tests fail such a row, and replay it even after a CI run of the
    command passed it)."""
    timeline: Timeline | None = None
    not_played: str | None = None
    """Why the row was not played at all (the driver failed the rows before it): neither
    passed nor failed, counted on its own."""

    @property
    def failed(self) -> bool:
        """Played and failed (a row not played has no verdict)."""
        return not self.passed and self.not_played is None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "where": self.where,
            "passed": self.passed,
            "skipped": self.skipped,
            "not_played": self.not_played,
            "expected": self.expected,
            "actual": self.actual,
            "observed": self.observed,
            "failures": self.failures,
            "seconds": round(self.seconds, 4),
            "known_failure": self.known_failure,
            "timeline": [] if self.timeline is None else self.timeline.as_json(),
        }


def describe(observation: Observation | None) -> str:
    """A short human form of an observation: ``fresh v2``, ``awaiting_fresh_source (timeout)``."""
    if observation is None:
        return "(nothing observed)"
    if isinstance(observation, Said):
        if observation.text is None:
            return f"withheld ({_clip_error(observation.error)})"
        return f"cited {_label(observation.uri, observation.text)}"
    if isinstance(observation, ListResult):
        if observation.state in ("fresh", "cited"):
            cited = "cited " if observation.state == "cited" else ""
            return f"{cited}list of {len(observation.resources)}"
        if observation.state == "withheld":
            return f"list withheld ({_clip_error(observation.detail)})"
        return f"list {observation.state} ({observation.reason})"
    if isinstance(observation, ToolCall):
        return _call_phrase(observation)
    if isinstance(observation, Catalog):
        words = [f"{observation.kind} {observation.state}"]
        label = catalog_version_of(observation.names)
        if label:
            words.append(label)
        if observation.reason:
            words.append(f"({observation.reason})")
        return " ".join(words)
    label = _version_label(observation)
    parts: list[str] = [observation.state]
    if label:
        parts.append(label)
    if observation.reason:
        parts.append(f"({observation.reason})")
    return " ".join(parts)


def _version_label(result: ReadResult) -> str | None:
    return None if result.text is None else _label(result.uri, result.text)


def _label(uri: str, text: str) -> str:
    """The version label of a reference-server text (``v2``), else the text's start."""
    prefix = f"{uri} @ "
    return text[len(prefix) :] if text.startswith(prefix) else repr(text[:40])


def _clip_error(error: str | None) -> str:
    text = " ".join((error or "an error").split())
    return text if len(text) <= 60 else text[:59] + "…"


STEP_TIMEOUT = 10.0
"""Seconds each step of a case may take (``freshcache acceptance --timeout``): a case
that has not finished within that times its steps plus two, stretched by
`load_factor`, fails as not finishing (a driver that hangs, a world stuck)."""


async def play(case: Case, world: World, *, step_timeout: float = STEP_TIMEOUT) -> CaseReport:
    """Play one case in a fresh ``world``; never raises for a failing case."""
    started = time.perf_counter()
    expect, expected = case.expect_on(world.revision)
    if expect is None:
        return CaseReport(case.id, case.where, True, expected_text(case), "-", skipped=expected)
    reason = fleet_unplayable(case, fleet_world=world.plays_fleet_rows) or world.unplayable(case)
    if reason is not None:
        return CaseReport(
            case.id, case.where, True, expected_text(case, expect), "-", skipped=reason
        )
    steps = [
        (phrase, s)
        for phrase, s in zip(step_phrases(case), case.row.steps, strict=True)
        if not isinstance(s, Given)
    ]
    setup = Setup.for_row(case.row.steps)
    last: Observation | None = None
    failures: list[str] = []
    actual: str | None = None
    timeline = world.timeline = Timeline()
    world.tools_handed = {}
    limit = step_timeout * (len(steps) + 2) * load_factor()
    try:
        with anyio.fail_after(limit):
            try:
                await world.start(setup)
            except BaseException:
                # A half-started world (the deadline passed while it reached the seed
                # situation) must not leave its servers' task groups open.
                await _stop_quietly(world)
                raise
            try:
                baseline = world.server_reads()
                background: list[ReadResult | Said] = []
                timeline.begin()
                feeds = world.state_changes()
                async with anyio.create_task_group() as tg:
                    for who, changes in feeds:
                        tg.start_soon(note_changes, changes, timeline, who)
                    for phrase, step in steps:
                        timeline.note(f"step: {phrase}")
                        last = await _do(world, step, tg, background, last, setup)
                        note_result(timeline, step, last)
                    await world.settle()
                    for _, changes in feeds:
                        await changes.aclose()
                reads = world.server_reads() - baseline
                counts = world.fleet_counts()
                calls = world.tool_calls()
                if calls is not None:
                    counts = {**(counts or {}), TOOL_CALLS: calls}
                failures = check(expect, last, world.observed(), reads, counts)
                actual = compared(expect, last, world.observed(), reads, counts)
            finally:
                await world.stop()
    except TimeoutError:
        failures = [f"the case did not finish within {limit:.0f}s"]
        if world.last_busy is not None:
            failures[0] += f" (its last settle still found busy: {world.last_busy})"
    except Exception as exc:  # a crash is a failed case, reported with its cause
        inner = getattr(exc, "exceptions", None)  # a task group's one failure: name it
        while isinstance(inner, tuple) and len(inner) == 1 and isinstance(inner[0], Exception):
            exc = inner[0]
            inner = getattr(exc, "exceptions", None)
        failures = [f"crashed: {type(exc).__name__}: {exc}"]
        timeline.note(f"crashed at {crash_site(exc)}")
    played = report(case, last, failures, started, actual, timeline, expect)
    played.settle_gave_up = world.settle_timeouts
    return played


async def _stop_quietly(world: World) -> None:
    """Stop ``world`` after its start failed, whatever it got to; its own error (what
    start left unset) would hide the real one. Not in a scope of its own: the task
    groups start entered must be exited from where they were entered."""
    with contextlib.suppress(Exception):
        await world.stop()


def crash_site(exc: BaseException, frames: int = 3) -> str:
    """Where ``exc`` was raised: its innermost frames, innermost first (for the timeline
    that ``-v`` prints; a crash is a bug of the library or of the test world)."""
    stack = traceback.extract_tb(exc.__traceback__)[-frames:]
    sites = [f"{_short_path(f.filename)}:{f.lineno} {f.name}" for f in reversed(stack)]
    return " <- ".join(sites) or "an unknown place"


def _short_path(filename: str) -> str:
    """``freshcache/_fleet/_follow.py``, ``anyio/streams/memory.py``: from the package."""
    parts = PurePath(filename).parts
    if "freshcache" in parts:
        last = len(parts) - 1 - parts[::-1].index("freshcache")
        return "/".join(parts[last:])
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1 :])
    return PurePath(filename).name


FLEET_ROW = (
    "a fleet row: played on the fleet wire against a Valkey/Redis server "
    "(freshcache acceptance --fleet redis://host:port/db)"
)


def is_fleet_row(case: Case) -> bool:
    """Whether ``case`` starts ``given a fleet of N workers`` (played by `FleetWorld`)."""
    return fleet_size(case.row.steps) is not None


def is_catalog_row(case: Case) -> bool:
    """Whether ``case`` looks at a catalog (``tools``, ``prompts``, ``templates``): a
    fleet world plays it too, through a follower (the fleet shares catalogs)."""
    return any(
        isinstance(step, Observe) and step.how in ("catalog", "catalog_status", "mutate_catalog")
        for step in case.row.steps
    )


def fleet_unplayable(case: Case, *, fleet_world: bool) -> str | None:
    """Fleet rows play only in a fleet world; a fleet world plays those and the catalog
    rows (on a fleet of `CATALOG_FLEET` workers, looking through a follower)."""
    is_fleet_row = fleet_size(case.row.steps) is not None
    if is_fleet_row and not fleet_world:
        return FLEET_ROW
    if fleet_world and not is_fleet_row and not is_catalog_row(case):
        return "not a fleet row (it plays on the other wires)"
    return None


def step_phrases(case: Case) -> list[str]:
    """The row's steps as written, one phrase per parsed step."""
    return [" ".join(p.split()) for p in case.steps_text.split(";") if p.strip()]


def note_result(timeline: Timeline, step: object, last: Observation | None) -> None:
    """After a step that observes (not *read X in background*): what it observed."""
    background = isinstance(step, Observe) and step.how == "background"
    if isinstance(step, (Observe, ReadUnselected)) and not background:
        timeline.note(f"result: {describe(last)}")


def report(
    case: Case,
    last: Observation | None,
    failures: list[str],
    started: float,
    actual: str | None = None,
    timeline: Timeline | None = None,
    expect: Sequence[Expect] | None = None,
) -> CaseReport:
    """The report of a played case (`KNOWN_FAILING` applied), for every player.
    ``actual``: what the expectations were compared with (``None``: the case ended
    before the comparison); ``expect``: the expectations for the world's revision
    (default: the row's own)."""
    known: str | None = None
    if case.id in KNOWN_FAILING:
        if failures:
            known, failures = f"{KNOWN_FAILING[case.id]}: {'; '.join(failures)}", []
        else:
            failures = [
                f"listed in KNOWN_FAILING ({KNOWN_FAILING[case.id]}) but passes now: "
                "take it off that list in freshcache/acceptance/_runner.py"
            ]
    return CaseReport(
        case.id,
        case.where,
        not failures,
        expected_text(case, expect),
        "(not compared)" if actual is None else actual,
        failures,
        seconds=time.perf_counter() - started,
        known_failure=known,
        observed=describe(last),
        timeline=timeline,
    )


async def _do(
    world: World,
    step: Step,
    tg: anyio.abc.TaskGroup,
    background: list[ReadResult | Said],
    last: Observation | None,
    setup: Setup,
) -> Observation | None:
    match step:
        case Observe(how="read", uri=uri, principal=principal, timeout=timeout, worker=worker):
            result = await world.read(uri, principal=principal, timeout=timeout, worker=worker)
            await world.settle()
            return result
        case Observe(how="status", uri=uri, principal=principal, worker=worker):
            await world.settle()
            return await world.status(uri, principal=principal, worker=worker)
        case Observe(how="list", worker=worker):
            listed = await world.list_resources(worker=worker)
            await world.settle()
            return listed
        case Observe(how="background", uri=uri, worker=worker):

            async def read_later() -> None:
                background.append(await world.read(uri, timeout=30.0, worker=worker))

            tg.start_soon(read_later)
            await world.settle()
            return last
        case Observe(how="context", uri=uri, also=also, worker=worker):

            async def context_later() -> None:
                background.append(await world.context(uri, also, worker=worker))

            tg.start_soon(context_later)
            await world.settle()
            return last
        case Observe(how="catalog", uri=kind, principal=principal, worker=worker):
            catalog = await world.catalog(kind, principal=principal, worker=worker)
            if kind == "tools" and isinstance(catalog, Catalog) and world.tools_handed is not None:
                world.tools_handed[worker] = catalog
            await world.settle()
            return catalog
        case Observe(how="catalog_status", uri=kind, worker=worker):
            await world.settle()
            return await world.catalog_status(kind, worker=worker)
        case Observe(how="mutate_catalog", uri=kind, worker=worker):
            # Mutate everything reachable of what the client handed out; what the next
            # caller gets must not change (invariant 13).
            handed = await world.catalog(kind, worker=worker)
            if isinstance(handed, Catalog):
                mutate_everything(handed)
            again = await world.catalog(kind, worker=worker)
            await world.settle()
            return again
        case Observe(how="call_tool", uri=name, worker=worker, says_seen=says_seen):
            call = await world.call_tool(name, worker=worker, says_seen=says_seen)
            await world.settle()
            return call
        case Observe(how="await_background"):
            await wait_for(lambda: background, limit=30.0, what="the background read")
            await world.settle()
            return background.pop(0)
        case Observe():
            raise AssertionError(step)
        case TimePasses(seconds=seconds):
            await world.advance(seconds)
            await world.settle()
            return last
        case Select(uris=uris):
            await world.select(uris)
            await world.settle()
            return last
        case ServerSets() | Notify() | NextRead() | ServerChange():
            await world.act(step)
            await world.settle()
            return last
        case ReadUnselected(count=count):
            for n in range(count):
                await world.act(ServerSets(bulk_uri(n), "v1", notify=False))
                last = await world.read(bulk_uri(n))
            await world.settle()
            return last
        case FleetChange():
            await world.act_on_fleet(step)
            await world.settle()
            return last


class Counted(Protocol):
    @property
    def untrusted_messages(self) -> int: ...


class EngineView(Protocol):
    """The engine's numbers `check` reads (a `FreshnessEngine`, or a client's report)."""

    @property
    def counters(self) -> Counted: ...

    @property
    def tracked_uris(self) -> int: ...


class Observed(Protocol):
    """What `check` looks at besides the last observation: a cache, or a bare engine."""

    @property
    def stream_status(self) -> str: ...

    @property
    def engine(self) -> EngineView: ...


def check(
    expectations: Sequence[Expect],
    last: Observation | None,
    world: Observed,
    reads: int,
    fleet_counts: dict[str, int] | None = None,
) -> list[str]:
    """What a row's expectations find wrong with what was observed (empty: passed)."""
    failures: list[str] = []
    for expect in expectations:
        match expect.what:
            case "state":
                if last is None:
                    failures.append("nothing was observed (add a 'read' or 'status' step)")
                    continue
                if isinstance(last, Said) or last.state in ("cited", "withheld"):
                    failures.extend(_judge_stateless(expect, last))
                    continue
                if last.state != expect.state:
                    failures.append(f"state is {last.state}, expected {expect.state}")
                if expect.reason is not None and last.reason != expect.reason:
                    failures.append(f"reason is {last.reason}, expected {expect.reason}")
                if expect.version is not None and isinstance(last, Catalog):
                    label = catalog_version_of(last.names)
                    if label != expect.version:
                        failures.append(f"catalog is {label or 'empty'}, expected {expect.version}")
                elif expect.version is not None:
                    if not isinstance(last, ReadResult) or last.text is None:
                        failures.append(f"no text, expected {expect.version}")
                    elif last.text != text_for(last.uri, expect.version):
                        failures.append(f"text is {last.text!r}, expected version {expect.version}")
            case "server_read" | "no_server_read":
                wanted = expect.what == "server_read"
                flag = getattr(last, "server_read", None)
                if flag != wanted:
                    failures.append(f"server_read is {flag}, expected {wanted}")
            case "server_reads":
                if reads != expect.number:
                    failures.append(f"the server answered {reads} reads, expected {expect.number}")
            case "server_reads_at_most":
                if reads > expect.number:
                    failures.append(
                        f"the server answered {reads} reads, expected at most {expect.number}"
                    )
            case "listed" | "not_listed":
                if not isinstance(last, ListResult):
                    failures.append("the last observation is not a list")
                    continue
                present = any(r.uri == expect.uri for r in last.resources)
                if present != (expect.what == "listed"):
                    failures.append(
                        f"{expect.uri} {'missing from' if not present else 'present in'} the list"
                    )
            case "stream":
                if world.stream_status != expect.word:
                    failures.append(f"stream is {world.stream_status}, expected {expect.word}")
            case "untrusted":
                got = world.engine.counters.untrusted_messages
                if got < expect.number:
                    failures.append(
                        f"{got} untrusted messages counted, expected at least {expect.number}"
                    )
            case "remediation":
                said = _remediation_word(last)
                if said != expect.word:
                    failures.append(f"remediation {said}, expected {expect.word}")
            case "tracked_uris_at_most":
                tracked = world.engine.tracked_uris
                if tracked > expect.number:
                    failures.append(
                        f"the engine tracks {tracked} URIs, expected at most {expect.number}"
                    )
            case "fleet":
                counted = None if fleet_counts is None else fleet_counts.get(expect.word)
                if counted != expect.number:
                    failures.append(
                        f"the fleet counted {counted} {expect.word}, expected {expect.number}"
                    )
            case (
                "call"
                | "retried"
                | "not_retried"
                | "relisted"
                | "not_relisted"
                | "tool_error"
                | "tool_calls"
            ):
                failures.extend(_judge_call(expect, last, fleet_counts))
    return failures


TOOL_CALLS = "tool_calls"
"""The ``tools/call`` count among the counters `check` is given."""


def _judge_call(
    expect: Expect, last: Observation | None, counts: dict[str, int] | None
) -> list[str]:
    """A ``call tool`` step's expectations: its state, whether it was sent again,
    whether the answer is a tool error, how many calls the server received."""
    if expect.what == "tool_calls":
        counted = None if counts is None else counts.get(TOOL_CALLS)
        if counted != expect.number:
            return [f"the server received {counted} tool calls, expected {expect.number}"]
        return []
    if not isinstance(last, ToolCall):
        return ["the last observation is not a tool call (add a 'call tool X' step)"]
    match expect.what:
        case "call":
            wrong = (
                [f"call is {last.state}, expected {expect.word}"]
                if last.state != expect.word
                else []
            )
            if expect.reason is not None and last.reason != expect.reason:
                wrong.append(f"call reason is {last.reason}, expected {expect.reason}")
            return wrong
        case "retried" | "not_retried":
            if last.retried != (expect.what == "retried"):
                return [f"the call was {'' if last.retried else 'not '}sent again"]
        case "relisted" | "not_relisted":
            relisted = last.catalog is not None
            if relisted != (expect.what == "relisted"):
                return [f"the tool catalog was {'' if relisted else 'not '}listed again"]
        case _:
            if not last.is_error:
                return ["the answer is not a tool error"]
    return []


def _call_phrase(call: ToolCall) -> str:
    words = [f"call {call.state}"]
    if call.reason:
        words.append(f"({call.reason})")
    return " ".join(words)


def _remediation_word(last: Observation | None) -> str:
    """What a denied result said can be done: ``available``, ``unavailable`` or ``none``
    (no structured denial envelope; a client without states has none either)."""
    remediation = getattr(last, "remediation", None)
    if remediation is None:
        return "none"
    return "available" if remediation.available else "unavailable"


def _judge_stateless(expect: Expect, last: Observation) -> list[str]:
    """A client without states is judged on what it handed over: text it would cite
    must be the version the row expects; anything but text (an error) is *withheld*,
    which satisfies every state that carries no text. Reasons are not checked: an
    error carries none of the protocol's reasons."""
    text = last.text if isinstance(last, Said) else None
    if expect.state in ("fresh", "stale"):
        wanted = f"{expect.state} {expect.version}"
        if last.state == "withheld":
            return [f"withheld, expected {wanted}"]
        if text is None or not isinstance(last, Said):
            return [f"{last.state}, expected {wanted}"]
        if expect.state == "stale":
            return [f"cited {_label(last.uri, text)} as current, expected {wanted}"]
        if expect.version is not None and text != text_for(last.uri, expect.version):
            return [f"cited {_label(last.uri, text)}, expected {wanted}"]
        return []
    if last.state == "cited":
        shown = _label(last.uri, text) if isinstance(last, Said) and text is not None else "it"
        return [f"cited {shown} where the row expects {expect.state}"]
    return []


def expected_text(case: Case, expect: Sequence[Expect] | None = None) -> str:
    """The row's expectations (or ``expect``), one phrase each in the form `compared`
    answers in."""
    return "; ".join(_phrase(e) for e in (case.row.expect if expect is None else expect))


def _phrase(expect: Expect) -> str:
    match expect.what:
        case "state":
            return _state_phrase(expect, str(expect.state), expect.version, expect.reason)
        case "server_read":
            return "server read"
        case "no_server_read":
            return "no server read"
        case "server_reads":
            return f"server reads {expect.number}"
        case "server_reads_at_most":
            return f"server reads at most {expect.number}"
        case "listed" | "not_listed":
            return f"{expect.what.replace('_', ' ')} {alias_of(expect.uri)}"
        case "stream":
            return f"stream {expect.word}"
        case "untrusted":
            return f"untrusted messages at least {expect.number}"
        case "remediation":
            return f"remediation {expect.word}"
        case "tracked_uris_at_most":
            return f"tracked uris at most {expect.number}"
        case "fleet":
            return f"{_FLEET_COUNTERS[expect.word]} {expect.number}"
        case "call":
            return f"call {expect.word}" + (f" ({expect.reason})" if expect.reason else "")
        case "retried" | "not_retried" | "relisted" | "not_relisted" | "tool_error":
            return expect.what.replace("_", " ")
        case "tool_calls":
            return f"tool calls {expect.number}"
    raise AssertionError(expect)


_FLEET_COUNTERS = {"fenced_writes": "fenced-off writes", "gaps": "sequence gaps"}
"""The fleet counters as the tables name them."""


def _state_phrase(expect: Expect, state: str, version: str | None, reason: str | None) -> str:
    """A state, with the version and the reason only where ``expect`` names them."""
    words = [state]
    if expect.version is not None:
        words.append(version or "(no text)")
    if expect.reason is not None:
        words.append(f"({reason})")
    return " ".join(words)


def compared(
    expectations: Sequence[Expect],
    last: Observation | None,
    world: Observed,
    reads: int,
    fleet_counts: dict[str, int] | None = None,
) -> str:
    """What each expectation was compared with, phrased as `expected_text` phrases it
    (a passing row reads the same in both columns)."""
    return "; ".join(_compared(e, last, world, reads, fleet_counts) for e in expectations)


def _compared(
    expect: Expect,
    last: Observation | None,
    world: Observed,
    reads: int,
    fleet_counts: dict[str, int] | None,
) -> str:
    match expect.what:
        case "state":
            if last is None:
                return "(nothing observed)"
            text: str | None = getattr(last, "text", None)
            version = None if text is None else _label(getattr(last, "uri", ""), text)
            if isinstance(last, Catalog):
                version = catalog_version_of(last.names)
            if isinstance(last, Said) or last.state in ("cited", "withheld"):
                # A client without states: what it handed over, in the words its
                # failure line uses ("cited v1"), never a state's reason it has not.
                return "withheld" if version is None else f"cited {version}"
            return _state_phrase(expect, last.state, version, last.reason)
        case "server_read" | "no_server_read":
            if last is None:
                return "(nothing observed)"
            return "server read" if getattr(last, "server_read", False) else "no server read"
        case "server_reads" | "server_reads_at_most":
            return f"server reads {reads}"
        case "listed" | "not_listed":
            if not isinstance(last, ListResult):
                return "(no list observed)"
            present = any(r.uri == expect.uri for r in last.resources)
            return f"{'listed' if present else 'not listed'} {alias_of(expect.uri)}"
        case "stream":
            return f"stream {world.stream_status}"
        case "untrusted":
            return f"untrusted messages {world.engine.counters.untrusted_messages}"
        case "remediation":
            return f"remediation {_remediation_word(last)}"
        case "tracked_uris_at_most":
            return f"tracked uris {world.engine.tracked_uris}"
        case "fleet":
            counted = None if fleet_counts is None else fleet_counts.get(expect.word)
            return f"{_FLEET_COUNTERS[expect.word]} {counted}"
        case "tool_calls":
            counted = None if fleet_counts is None else fleet_counts.get(TOOL_CALLS)
            return f"tool calls {counted}"
        case "call" | "retried" | "not_retried" | "relisted" | "not_relisted" | "tool_error":
            if not isinstance(last, ToolCall):
                return "(no tool call observed)"
            match expect.what:
                case "call":
                    reason = f" ({last.reason})" if expect.reason is not None else ""
                    return f"call {last.state}{reason}"
                case "retried" | "not_retried":
                    return "retried" if last.retried else "not retried"
                case "relisted" | "not_relisted":
                    return "relisted" if last.catalog is not None else "not relisted"
                case _:
                    return "tool error" if last.is_error else "no tool error"
    raise AssertionError(expect)


# ---------------------------------------------------------------------- engine level


class EngineWorld(World):
    """The engine level: `InMemorySource` and a virtual clock; no sockets, no sleeps
    but the few event-loop turns background work needs."""

    name = "engine"

    def __init__(self) -> None:
        self.server = ReferenceServer()
        self.clock = VirtualClock()
        self.principal: str | None = None

    async def start(self, setup: Setup) -> None:
        from freshcache.testing import InMemorySource

        self.principal = setup.principal
        configure_reference(self.server, setup)
        self.cache = self.make_cache(InMemorySource(self.server), setup)
        await self.cache.__aenter__()
        await self.reach_seed_situation(setup)

    async def stop(self) -> None:
        self.server.release_reads()
        await self.cache.__aexit__(None, None, None)

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        apply_to_reference(self.server, step, self.principal)

    settle_pause = 0.001

    async def _look(self) -> str | None:
        cache, server = self.cache, self.server
        if (due := cache.pending_reads + cache.queued_reads) > server.reads_in_flight:
            return f"{due} reads in flight or queued, {server.reads_in_flight} at the server"
        if cache.relisting:
            return "a re-list is under way"
        if server.acks_held and cache.selected:
            # Acks held: settled once a listen for the selection is open.
            if not server.listens_for(cache.selected):
                return "no listen for the selection yet (acks held)"
            return None
        if (
            server.listen_supported
            and not server.down
            and cache.selected
            and cache.stream_status not in ("live", "unsupported", "disabled")
        ):
            return f"the stream is {cache.stream_status}"
        return None

    def server_reads(self) -> int:
        return self.server.reads

    def unplayable(self, case: Case) -> str | None:
        return engine_unplayable(case)


def engine_unplayable(case: Case) -> str | None:
    """Why a row cannot be played where no wire carries the messages (engine level)."""
    for step in case.row.steps:
        match step:
            case NextRead(fault=fault) if fault in SCHEMA_FAULTS:
                return "no JSON at the engine level: a result's schema is checked on the wire"
            case NextRead(fault="version_refused") | ServerChange(what="listen_version_refused"):
                return "no protocol versions at the engine level: -32022 is a wire answer"
            case ServerChange(what="fall_silent"):
                return "no stream bytes at the engine level: keep-alives are SSE comments"
            case _:
                pass
    return None


def unplayable_on_2025(case: Case) -> str | None:
    """Why a row cannot be played against a server on revision 2025-11-25: its subject
    does not exist in that revision (DESIGN §6). Everything else plays there."""
    for step in case.row.steps:
        match step:
            case NextRead(fault="ttl_string" | "ttl_bool"):
                return "2025-11-25 results carry no ttlMs: there is no hint to break"
            case NextRead(fault="input_rounds"):
                return "2025-11-25 has no multi-round-trip requests (requestState is 2026-07-28's)"
            case NextRead(fault="version_refused"):
                return "2025-11-25 negotiates once, in initialize: no read is refused with -32022"
            case ServerChange(what="listen_version_refused"):
                return "2025-11-25 has no subscriptions/listen to refuse with -32022"
            case (
                NextRead(fault="hint_unknown_id")
                | Notify(kind="foreign")
                | ServerSets(push="unknown_subscription")
            ):
                return "2025-11-25 notifications carry no subscription id: none can be unknown"
            case _:
                pass
    return None
