"""The acceptance rows the single-cache tests play, and the ones only a wire can carry."""

from __future__ import annotations

from pathlib import Path

from freshcache.acceptance import is_fleet_row, load_cases

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
CASES = [c for c in load_cases([TABLES]) if not is_fleet_row(c)]
"""Every row but the fleet's (those have their own world: tests/test_fleet_tables.py)."""

WIRE_ONLY = {
    "read-without-contents",
    "ttl-as-string",
    "ttl-as-bool",
    "unsupported-version-renegotiates",
    "silent-after-keepalives",
}
"""What only a wire carries (JSON to break, protocol versions, stream bytes): the
engine-level worlds skip these rows and the HTTP and stdio worlds play them."""
