"""``freshcache proxy`` tells hosts of a catalog only when it changed (invariant 18): an
upstream stream lost and back with the same tool list is a re-proof, not a change, so
no host hears ``tools/list_changed`` for it, with one proxy in front of the upstream
and with two replicas on a fleet (where the listener's fence of the lost stream's
catalogs reaches the other replica over the fleet channel).

The barrier: after the re-proof, a real change of the tool list, then a real change of
a resource; each replica tells its hosts in the order it heard, so by the time the
host hears the resource's change every notice the re-proof could have caused is in.
(All but one: a re-proof not over within the proxy's ``--timeout`` is told as unproven
when it runs out, after the assertions here; `Notices.unproven` is pinned on its own in
tests/test_proxy_command.py, a re-proof that has since expired included.)
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from freshcache.acceptance._settle import settle
from tests.conftest import SdkServer
from tests.polling import scaled
from tests.proxy_support import Host, fleet_replicas_subscribed, host

pytestmark = [pytest.mark.anyio, pytest.mark.wire]
U = "guide://shipping/approval"


async def _stream_lost_and_back(sdk_server: SdkServer, hosts: tuple[Host, ...]) -> list[int]:
    """Every host has the tool list and U; the upstream drops its listen streams, each
    proxy is acknowledged on a new stream (a follower replica: by the listener's) and
    has re-proven what that acknowledgment fenced: U re-read, the tools re-listed.
    Returns the marks from before.

    The barrier's change waits for all of it: a change made while a replica's re-list
    is still under way is a change its re-list may see first, and told for it."""
    marks = [h.mark() for h in hosts]
    for h in hosts:  # the set-up's own stream acknowledged first: it counts before
        busy = await settle(partial(_busy, h), limit=scaled(30), pause=0.01)
        assert busy is None, busy
    acknowledged = [(await h.proxy_status())["acknowledgments"] for h in hosts]
    sdk_server.control("drop_listeners")
    for h, before in zip(hosts, acknowledged, strict=True):
        busy = await settle(partial(_busy, h, before), limit=scaled(30), pause=0.01)
        assert busy is None, busy
    return marks


async def _busy(h: Host, acknowledged: int = -1) -> str | None:
    """What of the re-proof is not over: the proxy's upstream stream acknowledged since
    (its count past ``acknowledged``) and live, no stream of its own still waiting for
    its acknowledgment, no read due and no re-list under way (an acknowledgment's
    fences, and so their re-reads and re-lists, come before it)."""
    link = await h.proxy_status()
    if link["acknowledgments"] <= acknowledged or link["stream"] != "live":
        return f"no new acknowledged stream yet ({link['stream']})"
    if not all(s["acknowledged"] for s in link.get("streams", {}).values()):
        return "a stream waiting for its acknowledgment"
    if link["due"] or link["relisting"]:
        return f"{link['due']} reads due, re-listing: {link['relisting']}"
    return None


@pytest.fixture
def status_socket() -> Iterator[Path]:
    """A path for a proxy's status socket (a Unix socket's path must be short)."""
    folder = Path(tempfile.mkdtemp(prefix="fc-status-"))
    yield folder / "status"
    shutil.rmtree(folder, ignore_errors=True)


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
    sdk_server: SdkServer, tmp_path: Path, status_socket: Path, revision: str, transport: str
) -> None:
    async with (
        host([sdk_server.url], revision, transport, tmp_path, status=status_socket) as h,
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
