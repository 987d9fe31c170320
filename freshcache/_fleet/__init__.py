"""The fleet's machinery (see `freshcache.fleet`): the shared store, the worker, the source.

Imported only when a `FreshCache` is given ``fleet=``; this is where redis is imported
(`attach_fleet`, the one entry point, imports it only when called).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import MissingDependencyError
from ..fleet import Fleet, as_fleet

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

    from ._worker import FleetWorker


def attach_fleet(
    fleet: str | Fleet, server_id: str, meter_provider: MeterProvider | None
) -> FleetWorker:
    """The worker behind ``FreshCache(..., fleet=...)``; needs the ``fleet`` extra."""
    config = as_fleet(fleet)
    try:
        import redis.asyncio  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            "fleet= needs redis-py's asyncio client: pip install 'freshcache[fleet]' "
            "(from a checkout: pip install '.[fleet]')"
        ) from exc
    from ._worker import FleetWorker

    return FleetWorker(config, server_id, meter_provider)
