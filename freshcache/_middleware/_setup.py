"""`FreshCache`'s checks of its arguments, its fleet hook, its discovery of the server
and its `describe` snapshot: the parts of the cache that run once or on demand, beside
the read path (`_cache`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._core import FreshnessEngine, Store
from .._core._backoff import BackoffSettings
from .._errors import ConfigurationError, FreshCacheError
from .._sources._source import CAPABILITIES, ServerInfo, Source
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

    from .._fleet._worker import FleetWorker
    from ..fleet import Fleet

log = logging.getLogger("freshcache")


def check_timeout(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")


def checked_deadline(timeout: float | None, default: float) -> float:
    """A call's ``timeout=`` (``default`` when not given), checked."""
    deadline = default if timeout is None else timeout
    check_timeout("timeout", deadline)
    return deadline


def check_count(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a whole number >= 1, got {value!r}")


def check_arguments(
    source: Source,
    select: Iterable[str],
    read_timeout: float,
    max_concurrent_reads: int,
    ack_timeout: float,
) -> None:
    """`FreshCache`'s arguments, checked in the order they were always checked."""
    if isinstance(select, str):
        raise ConfigurationError(
            f"select= takes a list of URIs, got the string {select!r}; write [{select!r}]"
        )
    check_timeout("read_timeout", read_timeout)
    check_count("max_concurrent_reads", max_concurrent_reads)
    check_timeout("ack_timeout", ack_timeout)
    if not isinstance(source, Source):
        lacking = [name for name in _SOURCE_MEMBERS if not hasattr(source, name)]
        raise ConfigurationError(
            f"source must be a freshcache Source (HttpSource, StdioSource, ...), got {source!r}, "
            f"which lacks {', '.join(lacking) or 'nothing by name'}; a Source of your own "
            f"declares each capability ({', '.join(CAPABILITIES)}), None where it lacks one"
        )


_SOURCE_MEMBERS = tuple(
    sorted(
        (name for name in vars(Source) if not name.startswith("_")),
        key=lambda name: (name in CAPABILITIES, name),
    )
)
"""What a `Source` must have, by name (the capabilities last), for the error above."""


FLEET_BACKOFF = BackoffSettings(
    base=0.1, cap=2.0, quick_death=0.0, max_quick_deaths=10**6, max_per_hour=10**6
)
"""A follower's "stream" comes and goes with the listener: re-listen at once."""


def with_fleet(
    fleet: str | Fleet | None,
    source: Source,
    meter_provider: MeterProvider | None,
    backoff: BackoffSettings | None,
) -> tuple[FleetWorker | None, Source, BackoffSettings | None]:
    """The fleet hook: with ``fleet=``, the worker, the source it wraps and the backoff."""
    if fleet is None:
        return None, source, backoff
    from .._fleet import attach_fleet

    worker = attach_fleet(fleet, source.identity, meter_provider)
    return worker, worker.wrap(source), FLEET_BACKOFF if backoff is None else backoff


async def discover(
    source: Source,
    telemetry: Telemetry,
    ack_timeout: float,
    unusable: Callable[[FreshCacheError], None],
) -> ServerInfo | None:
    """Ask the server what it is (``source.start()``) within ``ack_timeout``; ``None``
    when it did not answer. A configuration problem is handed to ``unusable``."""
    try:
        with anyio.fail_after(ack_timeout), telemetry.request("server/discover"):
            return await source.start()
    except TimeoutError:  # (cancellation is a BaseException: it is never caught here)
        log.warning(
            "server %s did not answer discovery in %.1fs",
            source.identity,
            ack_timeout,
        )
        return None
    except FreshCacheError as exc:
        # A configuration problem (no version in common, not an MCP endpoint): no
        # read can work. The caller hears of it at the next read, not as a crash.
        log.error("server %s cannot be used: %s", source.identity, exc)
        unusable(exc)
        return ServerInfo(reachable=True, listen=False, detail=str(exc))
    except Exception as exc:
        log.warning("server %s discovery failed: %r", source.identity, exc)
        return None


class Described(Protocol):
    """What `describe` reads of a `FreshCache`."""

    @property
    def source(self) -> Source: ...

    @property
    def engine(self) -> FreshnessEngine: ...

    @property
    def store(self) -> Store: ...

    @property
    def server_info(self) -> ServerInfo | None: ...

    @property
    def stream_status(self) -> str: ...

    @property
    def retry_at(self) -> float | None: ...


def describe(cache: Described, fleet: FleetWorker | None) -> dict[str, Any]:
    """`FreshCache.describe`: stream, selection, counters, store use."""
    counters = cache.engine.counters
    described = {
        "server": cache.source.identity,
        "protocol_version": getattr(cache.server_info, "protocol_version", None),
        "stream": cache.stream_status,
        "retry_in": None
        if cache.retry_at is None
        else max(0.0, cache.retry_at - anyio.current_time()),
        "selected": sorted(cache.engine.selected),
        "covered": sorted(cache.engine.covered),
        "entries": cache.store.entry_count,
        "bytes": cache.store.bytes_held,
        "counters": counters.as_dict(),
    }
    if fleet is not None:  # fleet hook: who holds the listener lease
        described["fleet"] = fleet.describe()
    return described
