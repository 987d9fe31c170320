"""The proxy's opt-in status socket (`freshcache._proxy._status`, the grader's look) never
takes the proxy down and never removes a socket it did not bind."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from freshcache._proxy._status import serve_status
from tests.polling import until

pytestmark = pytest.mark.anyio


async def test_a_path_it_cannot_bind_is_logged_and_the_proxy_goes_on(tmp_path: Path) -> None:
    with anyio.fail_after(5):  # returns (before: OSError out of the proxy's task group)
        await serve_status(cast(Any, None), str(tmp_path / "missing" / "status.sock"))


async def test_at_exit_it_removes_only_the_socket_it_bound(tmp_path: Path) -> None:
    path = tmp_path / "status.sock"
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_status, cast(Any, None), str(path))
        await until(path.exists)
        os.unlink(path)  # another proxy takes the path over
        other = socket.socket(socket.AF_UNIX)
        other.bind(str(path))
        tg.cancel_scope.cancel()
    try:
        assert path.exists()  # before: unlinked at exit, whoever bound it
    finally:
        other.close()
