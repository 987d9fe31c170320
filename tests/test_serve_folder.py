"""`freshcache serve DIR`'s folder mirror, in process: what a look at the disk finds and
what the reference server then answers (the CLI tests play the same over real wires)."""

from __future__ import annotations

import base64
import os

import anyio
import pytest

from freshcache._core import ReadReply, RequestFailed
from freshcache._errors import ConfigurationError
from freshcache.acceptance._serve import folder_reference


def test_a_look_finds_new_changed_and_deleted_files_and_reads_only_changed_ones(tmp_path):
    (tmp_path / "a.md").write_text("one")
    (tmp_path / "b.txt").write_text("two")
    lines: list[str] = []
    folder = folder_reference(tmp_path, lines.append)
    assert sorted(folder.server.resources) == sorted(
        p.resolve().as_uri() for p in (tmp_path / "a.md", tmp_path / "b.txt")
    )
    assert folder.server.resources[(tmp_path / "a.md").resolve().as_uri()].mime_type == "text/markdown"
    assert lines == []  # the first look notifies nobody
    assert folder.look() == []  # nothing changed on disk

    (tmp_path / "a.md").write_text("one, edited")
    os.utime(tmp_path / "a.md", ns=(1, 1))  # a new stamp even on a coarse clock
    (tmp_path / "b.txt").unlink()
    (tmp_path / "c.json").write_text("{}")
    changes = folder.look()
    assert sorted((c.what, c.uri.rsplit("/", 1)[1]) for c in changes) == [
        ("deleted", "b.txt"),
        ("new", "c.json"),
        ("updated", "a.md"),
    ]


def test_subscribers_hear_of_each_change_and_reads_follow_the_disk(tmp_path):
    a = tmp_path / "a.md"
    a.write_text("one")
    folder = folder_reference(tmp_path, lambda line: None)
    server = folder.server
    uri = a.resolve().as_uri()

    async def main() -> None:
        registered = server.subscribe(1, frozenset({uri}), True)
        assert registered is not None
        _, receive = registered
        assert (await receive.receive())[0] == "ack"
        a.write_text("two")
        os.utime(a, ns=(2, 2))
        folder.apply(folder.look())
        assert await receive.receive() == ("updated", uri)
        reply = await server.read(uri)
        assert isinstance(reply, ReadReply) and reply.contents[0].text == "two"

        (tmp_path / "new.bin").write_bytes(b"\xff\x00\xfe")
        folder.apply(folder.look())
        assert (await receive.receive())[0] == "list_changed"
        binary = await server.read((tmp_path / "new.bin").resolve().as_uri())
        assert isinstance(binary, ReadReply)
        assert binary.contents[0].text is None
        assert base64.b64decode(binary.contents[0].blob or "") == b"\xff\x00\xfe"

        a.unlink()
        folder.apply(folder.look())
        assert await receive.receive() == ("updated", uri)
        assert (await receive.receive())[0] == "list_changed"
        gone = await server.read(uri)
        assert isinstance(gone, RequestFailed) and gone.kind == "not_found"
        server.unsubscribe(1)
        receive.close()

    anyio.run(main)


def test_a_missing_folder_or_a_file_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        folder_reference(tmp_path / "nope", print)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="is not a folder"):
        folder_reference(tmp_path / "file", print)
