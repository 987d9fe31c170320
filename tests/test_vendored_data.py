"""The vendored test data is the upstream file it says it is (see tests/data/README.md)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .conftest import MCP_SCHEMA

README = MCP_SCHEMA.parents[1] / "README.md"


def test_the_vendored_schema_matches_the_checksum_its_readme_names():
    named = re.search(r"sha256 `([0-9a-f]{64})`", README.read_text(encoding="utf-8"))
    assert named, "tests/data/README.md names no sha256"
    assert hashlib.sha256(MCP_SCHEMA.read_bytes()).hexdigest() == named.group(1)


def test_the_vendored_schema_defines_every_message_the_tests_validate(mcp_schema: dict[str, Any]):
    assert mcp_schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for name in (
        "DiscoverRequest",
        "ReadResourceRequest",
        "ListResourcesRequest",
        "SubscriptionsListenRequest",
        "CancelledNotification",
        "ClientRequest",
        "ClientNotification",
    ):
        assert name in mcp_schema["$defs"], name
