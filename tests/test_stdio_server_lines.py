"""The stdio reference server's own line splitter (it imports none of the client's)."""

from __future__ import annotations

import pytest

from freshcache.acceptance._stdio_server import _Lines

STREAM = b'{"a": 1}\n\n{"b": 2}\n' + b"x" * 40 + b'\n{"c": 3}\npartial'


def _split(data: bytes, cuts: list[int], limit: int) -> list[bytes]:
    lines = _Lines(limit)
    out: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
        out += lines.feed(data[start:end])
    return out


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_the_same_lines_come_out_wherever_the_input_is_cut(cut):
    # The 40-byte line is over the 32-byte limit: skipped whole, never half of it.
    assert _split(STREAM, [cut], limit=32) == [b'{"a": 1}', b"", b'{"b": 2}', b'{"c": 3}']


def test_an_over_long_line_fed_byte_by_byte_is_skipped_and_the_next_line_kept():
    cuts = list(range(1, len(STREAM)))
    assert _split(STREAM, cuts, limit=32) == [b'{"a": 1}', b"", b'{"b": 2}', b'{"c": 3}']
    assert _split(STREAM, cuts, limit=64)[3] == b"x" * 40
