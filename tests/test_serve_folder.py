"""`freshcache serve DIR`'s folder mirror, in process: what a look at the disk finds and
what the reference server then answers (the CLI tests play the same over real wires)."""

from __future__ import annotations

import base64
import os
import threading

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


def test_a_symlink_out_of_the_folder_is_skipped_with_one_line_and_one_inside_is_served(tmp_path):
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    docs.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (docs / "real.md").write_text("real")
    (docs / "leak.txt").symlink_to(outside / "secret.txt")
    (docs / "etc").symlink_to("/etc/hostname")
    (docs / "alias.md").symlink_to(docs / "real.md")
    (docs / "linked-dir").symlink_to(outside, target_is_directory=True)
    lines: list[str] = []
    folder = folder_reference(docs, lines.append)

    served = {uri.rsplit("/", 1)[1]: r.text for uri, r in folder.server.resources.items()}
    assert served == {"real.md": "real", "alias.md": "real"}
    assert "secret" not in "".join(folder.server.resources[u].text for u in folder.server.resources)
    assert sorted(lines) == [
        f"skipped {docs.resolve() / 'etc'}: a symlink to {os.path.realpath('/etc/hostname')}, "
        f"outside {docs.resolve()}",
        f"skipped {docs.resolve() / 'leak.txt'}: a symlink to {(outside / 'secret.txt').resolve()}, "
        f"outside {docs.resolve()}",
    ]
    assert folder.look() == [] and len(lines) == 2  # said once, not at every look


def test_a_served_file_replaced_by_a_symlink_out_is_deleted(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    page = docs / "page.md"
    page.write_text("page")
    folder = folder_reference(docs, lambda line: None)
    page.unlink()
    page.symlink_to(tmp_path / "secret.txt")
    changes = folder.look()
    assert [(c.what, c.text) for c in changes] == [("deleted", None)]


def test_a_fifo_is_skipped_at_once_and_a_look_never_blocks_on_it(tmp_path):
    # open() of a FIFO without a writer blocks for ever: a look that did so would never
    # list the folder (at start) or freeze the watcher (later). The look runs in a
    # thread here so that a regression fails at the deadline instead of hanging.
    (tmp_path / "a.md").write_text("one")
    os.mkfifo(tmp_path / "pipe")
    lines: list[str] = []
    done: list[object] = []

    def start() -> None:
        folder = folder_reference(tmp_path, lines.append)
        os.mkfifo(tmp_path / "later")
        (tmp_path / "a.md").write_text("two")
        os.utime(tmp_path / "a.md", ns=(5, 5))
        done.append(folder.look())

    worker = threading.Thread(target=start, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert done, "a look blocked on a FIFO"
    (changes,) = done
    assert [(c.what, c.text) for c in changes] == [("updated", "two")]  # type: ignore[union-attr]
    assert lines == [
        f"skipped {tmp_path.resolve() / 'pipe'}: not a regular file (a FIFO)",
        f"skipped {tmp_path.resolve() / 'later'}: not a regular file (a FIFO)",
    ]


def test_a_file_over_the_limit_is_skipped_unread_with_the_option_that_raises_it(tmp_path):
    (tmp_path / "small.txt").write_text("x" * 300)
    (tmp_path / "big.bin").write_bytes(b"\0" * 5000)
    lines: list[str] = []
    folder = folder_reference(tmp_path, lines.append, max_bytes=1000)
    assert [uri.rsplit("/", 1)[1] for uri in folder.server.resources] == ["small.txt"]
    assert lines == [
        f"skipped {tmp_path.resolve() / 'big.bin'}: 5000 bytes, over the 1000-byte limit "
        "(freshcache serve --max-file-bytes N raises it)"
    ]
    (tmp_path / "small.txt").write_text("x" * 2000)  # a served file that grew past it
    changes = folder.look()
    assert [c.what for c in changes] == ["deleted"]
    assert lines[-1].endswith("2000 bytes, over the 1000-byte limit (freshcache serve --max-file-bytes N raises it)")
