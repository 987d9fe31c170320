"""Issue 22: the promise has one home. Regression tests, one per defect, on real parts
(HTTP on 127.0.0.1, the reference servers' fault hooks) where the defect lives on a wire.
"""

from __future__ import annotations

import pytest

from freshcache import FreshCache, UnsupportedVersionError
from tests.test_http_source import U, Script, reference, rpc_error, serving

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------- 5: -32022 on discover


@pytest.mark.wire
@pytest.mark.parametrize("refused", [("server/discover",), ("server/discover", "resources/read")])
async def test_minus_32022_without_data_on_discover_is_one_documented_error(refused):
    """Defect 5: no bare ExceptionGroup from ``async with``, and no fresh read after the
    error, whether only discovery or every request is refused."""
    script = Script()
    for method in refused:
        script.then(method, *[rpc_error(-32022, "Unsupported protocol version", 400)] * 10)
    async with serving(reference(), hook=script) as (_http, make):
        with pytest.raises(UnsupportedVersionError):
            async with FreshCache(make(), select=[U], read_timeout=3.0) as cache:
                await cache.read(U)
        assert cache.engine.unusable is not None
        assert cache.status(U).state != "fresh"
