"""``freshcache proxy`` tells hosts of a catalog only when it changed (invariant 18): an
upstream stream lost and back with the same tool list is a re-proof, not a change, so
no host hears ``tools/list_changed`` for it, with one proxy in front of the upstream
and with two replicas on a fleet (where the listener's fence of the lost stream's
catalogs reaches the other replica over the fleet channel).

The barrier: after the re-proof, a real change of the tool list, then a real change of
a resource; each replica tells its hosts in the order it heard, so by the time the
host hears the resource's change every notice the re-proof could have caused is in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import SdkServer
from tests.polling import scaled, until
from tests.proxy_support import Host, fleet_replicas_subscribed, host

pytestmark = [pytest.mark.anyio, pytest.mark.wire]
U = "guide://shipping/approval"


async def _stream_lost_and_back(sdk_server: SdkServer, hosts: tuple[Host, ...]) -> list[int]:
    """Every host has the tool list and U; the upstream drops its listen streams and the
    proxy listens again (its acknowledgment re-reads U). Returns the marks from before."""
    marks = [h.mark() for h in hosts]
    reads = sdk_server.reads(U)
    sdk_server.control("drop_listeners")
    await until(lambda: sdk_server.reads(U) > reads, scaled(30))
    return marks


async def _barrier(sdk_server: SdkServer, hosts: tuple[Host, ...], marks: list[int]) -> None:
    sdk_server.control("tools", names=["deployed_after_the_new_stream"])
    for h, since in zip(hosts, marks, strict=True):
        await h.heard_of("tools", since=since)
        names = {tool.name for tool in (await h.client.list_tools()).tools}
        assert "deployed_after_the_new_stream" in names
    sdk_server.control("set", uri=U, text="Shipping approval v3")
    for h, since in zip(hosts, marks, strict=True):
        await h.heard_of(f"updated {U}", since=since)


@pytest.mark.parametrize(
    ("revision", "transport"), [("2026-07-28", "stdio"), ("2025-11-25", "http")]
)
async def test_a_stream_lost_and_back_with_the_same_tools_tells_no_list_change(
    sdk_server: SdkServer, tmp_path: Path, revision: str, transport: str
) -> None:
    async with (
        host([sdk_server.url], revision, transport, tmp_path) as h,
        anyio.create_task_group() as tg,
    ):
        assert "v1" in (await h.client.read_resource(U)).contents[0].text
        await h.client.list_tools()
        await h.subscribe(tg, U)
        marks = await _stream_lost_and_back(sdk_server, (h,))
        await _barrier(sdk_server, (h,), marks)
        heard = h.heard[marks[0] :]
        assert heard.count("tools") == 1, heard  # the real change, not the re-proof
        tg.cancel_scope.cancel()


async def test_two_replicas_tell_no_list_change_for_the_listeners_new_stream(
    sdk_server: SdkServer, valkey: Any, tmp_path: Path
) -> None:
    async with fleet_replicas_subscribed(sdk_server.url, valkey.url, tmp_path, U) as hosts:
        marks = await _stream_lost_and_back(sdk_server, hosts)
        await _barrier(sdk_server, hosts, marks)
        for h, since in zip(hosts, marks, strict=True):
            heard = h.heard[since:]
            assert heard.count("tools") == 1, heard
