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
    assert (
        folder.server.resources[(tmp_path / "a.md").resolve().as_uri()].mime_type == "text/markdown"
    )
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


def test_a_hard_link_is_skipped_with_one_line_unless_allowed(tmp_path):
    # A hard link in the folder to a file outside it: the file outside was served
    # (nothing but the link count tells a second name exists, and not where it is).
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    docs.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    os.link(outside / "secret.txt", docs / "leak.txt")
    (docs / "page.md").write_text("page")
    lines: list[str] = []
    folder = folder_reference(docs, lines.append)
    served = {uri.rsplit("/", 1)[1]: r.text for uri, r in folder.server.resources.items()}
    assert served == {"page.md": "page"}
    assert lines == [
        f"skipped {docs.resolve() / 'leak.txt'}: a file with 2 hard links, which may lie "
        f"outside {docs.resolve()} (freshcache serve --allow-hard-links serves it)"
    ]
    assert folder.look() == [] and len(lines) == 1  # said once

    # A served file that gets a second name is no longer served; allowed, it is.
    os.link(docs / "page.md", outside / "copy.md")
    assert [c.what for c in folder.look()] == ["deleted"]
    allowed = folder_reference(docs, lines.append, hard_links=True)
    assert sorted(u.rsplit("/", 1)[1] for u in allowed.server.resources) == ["leak.txt", "page.md"]


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
    assert lines[-1].endswith(
        "2000 bytes, over the 1000-byte limit (freshcache serve --max-file-bytes N raises it)"
    )


def test_a_file_swapped_for_a_symlink_out_after_the_inside_check_is_not_read(tmp_path, monkeypatch):
    # The race: the path is checked inside the folder (realpath), then swapped for a
    # link to a file outside before it is opened. Opening must not follow the link.
    docs = tmp_path / "docs"
    docs.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    page = docs / "page.md"
    page.write_text("page")
    folder = folder_reference(docs, lambda line: None)
    page.write_text("page, edited")
    os.utime(page, ns=(7, 7))
    realpath = os.path.realpath
    target = os.fspath(docs.resolve() / "page.md")

    def swap_after_the_check(path, *args, **kwargs):
        real = realpath(path, *args, **kwargs)
        if os.fspath(path) == target and not page.is_symlink():
            page.unlink()
            page.symlink_to(secret)
        return real

    monkeypatch.setattr(os.path, "realpath", swap_after_the_check)
    changes = folder.look()
    monkeypatch.undo()
    assert all("secret" not in (c.text or "") for c in changes), changes
    assert all("secret" not in r.text for r in folder.server.resources.values())
    # The next look sees the link out for what it is.
    assert [(c.what, c.text) for c in folder.look()] == [("deleted", None)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd (Linux)")
def test_a_folder_swapped_for_a_symlink_out_after_the_inside_check_is_not_read(
    tmp_path, monkeypatch
):
    # O_NOFOLLOW guards the last part of the path only; a folder on the way swapped for
    # a link out is caught by where the opened file really is.
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    (docs / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "page.md").write_text("secret")
    (docs / "sub" / "page.md").write_text("page")
    folder = folder_reference(docs, lambda line: None)
    (docs / "sub" / "page.md").write_text("page, edited")
    os.utime(docs / "sub" / "page.md", ns=(7, 7))
    realpath = os.path.realpath

    def swap_after_the_check(path, *args, **kwargs):
        real = realpath(path, *args, **kwargs)
        sub = docs / "sub"
        if os.fspath(path).endswith("page.md") and not sub.is_symlink():
            (sub / "page.md").unlink()
            sub.rmdir()
            sub.symlink_to(outside, target_is_directory=True)
        return real

    monkeypatch.setattr(os.path, "realpath", swap_after_the_check)
    changes = folder.look()
    monkeypatch.undo()
    assert all("secret" not in (c.text or "") for c in changes), changes
    assert all("secret" not in r.text for r in folder.server.resources.values())


def test_a_same_size_edit_with_its_mtime_put_back_is_seen(tmp_path):
    # cp -p, rsync -t, os.utime: the size and the modification time are those of the
    # old text. The inode change time is not.
    page = tmp_path / "page.md"
    page.write_text("aaa")
    folder = folder_reference(tmp_path, lambda line: None)
    before = page.stat()
    page.write_text("bbb")
    os.utime(page, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert [(c.what, c.text) for c in folder.look()] == [("updated", "bbb")]
    assert folder.server.resources[page.resolve().as_uri()].text == "aaa"  # not yet applied


def test_a_racily_clean_file_is_read_again_and_compared_by_content(tmp_path):
    # An edit in the same timestamp tick as the read before it leaves every stat field
    # as it was (git's "racily clean" index entries). Simulated: the stamp taken after
    # the edit is recorded as if it had been the one seen at the last look.
    page = tmp_path / "page.md"
    page.write_text("aaa")
    folder = folder_reference(tmp_path, lambda line: None)
    path = next(iter(folder.stamps))
    page.write_text("bbb")
    folder.stamps[path] = folder.stamp(path.stat())  # every stat field unchanged
    assert [(c.what, c.text) for c in folder.look()] == [("updated", "bbb")]
    assert folder.look() == []  # read again (still racy), the same contents: no change


def test_a_file_that_cannot_be_read_for_a_moment_is_not_deleted(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("aaa")
    folder = folder_reference(tmp_path, lambda line: None)
    page.write_text("bbbb")
    real_open = os.open

    def refuse(path, *args, **kwargs):
        if os.fspath(path).endswith("page.md"):
            raise OSError(24, "Too many open files")  # EMFILE
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    assert folder.look() == []  # not "deleted": the old text stays until it can be read
    monkeypatch.undo()
    assert [(c.what, c.text) for c in folder.look()] == [("updated", "bbbb")]


def test_a_path_that_is_not_a_regular_file_is_skipped_without_being_opened(tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("one")
    os.mkfifo(tmp_path / "pipe")
    opened: list[str] = []
    real_open = os.open

    def record(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", record)
    lines: list[str] = []
    folder_reference(tmp_path, lines.append)
    assert not any(p.endswith("pipe") for p in opened), opened
    assert lines == [f"skipped {tmp_path.resolve() / 'pipe'}: not a regular file (a FIFO)"]
