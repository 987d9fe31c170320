"""The command line against real servers: doctor, read, watch, serve (and their errors).

The servers are real processes: the official-SDK fixture, ``freshcache serve`` over
HTTP and stdio, and ``python -m http.server`` for a URL that is not MCP. The client
commands (read, doctor, watch, list) run through `main` in the test's process
(`run_cli`, `IN_PROCESS`); serve, acceptance, -v and the entry points run as programs.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from freshcache._cli import main
from tests.conftest import free_port
from tests.polling import until_sync
from tests.serve_support import Served, WebServer, start_serve, start_web_server

APPROVAL = "guide://shipping/approval"

pytestmark = pytest.mark.wire


IN_PROCESS = frozenset({"read", "doctor", "watch", "list"})
"""Commands `run_cli` runs through `main` in this process: each is a client of a real
server (which runs in its own process) and ends by itself; an interpreter start per
call cost the suite most of this file's CPU. ``serve``, ``acceptance`` and anything
with ``-v`` (which sets up logging for the process) run as programs, as do the tests
of the entry points themselves (`test_the_installed_programs_print_no_traceback_for_bad_input`,
signals, broken pipes)."""


def run_cli(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    if args and args[0] in IN_PROCESS:
        return run_main_here(list(args))
    return run_cli_process(*args, timeout=timeout)


def run_cli_process(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "freshcache._cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_main_here(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`main` in this process, as the program would run it: its exit status and what it
    printed. An exception that leaves `main` is what the console script would print as
    a traceback: it is returned as exit 70 with "Traceback" on stderr."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exc:  # argparse's usage errors, --help
                status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except Exception:
        return subprocess.CompletedProcess(
            argv,
            70,
            out.getvalue(),
            err.getvalue() + "Traceback (escaped main)\n" + traceback.format_exc(),
        )
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def test_doctor_reports_the_honoured_filter_the_hints_and_the_update_latency(sdk_server):
    trigger = (
        f"{sys.executable} -c \"import httpx; httpx.post('{sdk_server.control_url}', "
        f"json={{'op': 'set', 'uri': '{APPROVAL}', 'text': 'v2'}})\""
    )
    done = run_cli("doctor", sdk_server.url, "--uri", APPROVAL, "--trigger", trigger)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "reachable   yes (freshcache-fixture" in out
    assert f"read        {APPROVAL}: ttlMs=60000 cacheScope=private" in out
    assert f"resourceSubscriptions=['{APPROVAL}']" in out
    assert f"update      {APPROVAL} arrived" in out


def test_doctor_says_so_when_the_server_acknowledges_no_resource(sdk_server):
    sdk_server.control("ack_exclude", uris=[APPROVAL, "guide://shipping/returns"])
    done = run_cli("doctor", sdk_server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "never acknowledges resource subscriptions" in done.stdout
    assert "read before every use" in done.stdout


def test_doctor_exits_1_for_a_server_that_is_not_there():
    done = run_cli("doctor", f"http://127.0.0.1:{free_port()}/mcp", "--timeout", "3")
    assert done.returncode == 1
    assert "reachable   no" in done.stdout


def test_read_prints_text_only_when_fresh(sdk_server):
    done = run_cli("read", sdk_server.url, APPROVAL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Shipping approval v1: orders over $500 need a manager."
    sdk_server.control("deny", uri=APPROVAL)
    denied = run_cli("read", sdk_server.url, APPROVAL)
    assert denied.returncode == 1
    assert denied.stdout == ""
    assert f"{APPROVAL}: denied" in denied.stderr


def test_watch_prints_a_line_per_change(sdk_server):
    # 3 s: the stream goes live within it on a loaded machine too (1.5 s did not, once).
    done = run_cli("watch", sdk_server.url, APPROVAL, "guide://nope", "--duration", "3")
    assert done.returncode == 0, done.stderr
    assert f"{APPROVAL}: fresh" in done.stdout
    assert "guide://nope: not_found (not_found)" in done.stdout
    assert "-- stream live" in done.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["read", "ftp://x", "u"], "neither an http(s) URL"),
        (["read", "http://127.0.0.1:1/mcp"], "read takes one URI"),
        (["watch", "http://127.0.0.1:1/mcp"], "at least one URI"),
        (["doctor", "--"], "give the command"),
        (
            ["read", "u", "--", "no-such-server-command"],
            "'no-such-server-command' is not a command found on PATH",
        ),
        (
            ["watch", "u", "--", "./no/such/server"],
            "'./no/such/server' is not a command found on PATH",
        ),
        (["doctor", "--", "no-such-server-command"], "not a command found on PATH"),
    ],
    ids=[
        "bad-url",
        "read-without-uri",
        "watch-without-uri",
        "empty-command",
        "read-no-such-command",
        "watch-no-such-file",
        "doctor-no-such-command",
    ],
)
def test_user_mistakes_give_a_message_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.splitlines()) == 1, err


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "acceptance" in capsys.readouterr().out


# --------------------------------------------------------------------------- serve

SEED_TEXT = "Shipping approval v1: orders over $500 need a manager."


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "policy.md").write_text("# Policy\nOrders over $500 need a manager.\n")
    (docs / "sub" / "rates.json").write_text('{"flat": 5}')
    (docs / ".hidden").write_text("not served")
    return docs


@pytest.fixture
def served(tmp_path: Path, folder: Path) -> Iterator[Served]:
    server = start_serve(tmp_path, str(folder))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def web(tmp_path: Path) -> Iterator[WebServer]:
    server = start_web_server(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def python_writes(path: Path, text: str | None) -> str:
    """A --trigger command: write ``text`` to ``path`` (``None``: delete it)."""
    action = "p.unlink()" if text is None else f"p.write_text({text!r})"
    return f'{sys.executable} -c "import pathlib; p = pathlib.Path({str(path)!r}); {action}"'


def test_serve_without_a_folder_serves_the_seed_and_stops_cleanly_on_ctrl_c(tmp_path):
    server = start_serve(tmp_path)
    try:
        done = run_cli("read", server.url, APPROVAL)
        assert done.returncode == 0, done.stderr
        assert done.stdout == SEED_TEXT + "\n"
    finally:
        code = server.stop(signal.SIGINT)
    assert code == 130  # 128 + SIGINT, as every command stopped by Ctrl-C
    assert "seed resources" in server.output()
    assert server.output().rstrip().endswith("freshcache serve: stopped")
    assert "Traceback" not in server.err.read_text()


def test_serve_names_each_file_by_its_absolute_path_and_leaves_hidden_ones_out(served, folder):
    policy = (folder / "policy.md").resolve().as_uri()
    done = run_cli("read", served.url, policy, "--json")
    assert done.returncode == 0, done.stderr
    assert '"text": "# Policy\\nOrders over $500 need a manager.\\n"' in done.stdout
    doctor = run_cli("doctor", served.url)
    assert "list        2 resources on the first page" in doctor.stdout, doctor.stdout
    assert (folder / ".hidden").as_uri() not in doctor.stdout
    hidden = run_cli("read", served.url, (folder / ".hidden").resolve().as_uri())
    assert hidden.returncode == 1
    assert "not_found" in hidden.stderr


@pytest.mark.parametrize("poll", [False, True], ids=["watchfiles", "polling"])
def test_serve_notifies_an_edit_a_new_file_and_a_deleted_file(tmp_path, folder, poll):
    server = start_serve(tmp_path, str(folder), *(["--poll"] if poll else []))
    policy = folder / "policy.md"
    uri = policy.resolve().as_uri()
    try:
        edit = run_cli("doctor", server.url, "--uri", uri, "--trigger", python_writes(policy, "v2"))
        assert edit.returncode == 0, edit.stdout + edit.stderr
        assert f"update      {uri} arrived" in edit.stdout
        assert "after the trigger started" in edit.stdout
        assert run_cli("read", server.url, uri).stdout == "v2\n"

        new = folder / "sub" / "new.txt"
        added = run_cli(
            "doctor", server.url, "--uri", uri, "--trigger", python_writes(new, "hello")
        )
        assert added.returncode == 0, added.stdout + added.stderr
        assert "update      a list change arrived" in added.stdout
        assert run_cli("read", server.url, new.resolve().as_uri()).stdout == "hello\n"

        deleted = run_cli(
            "doctor", server.url, "--uri", uri, "--trigger", python_writes(policy, None)
        )
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr
        assert f"update      {uri} arrived" in deleted.stdout
        gone = run_cli("read", server.url, uri)
        assert gone.returncode == 1
        assert f"{uri}: not_found" in gone.stderr
        server.wait_for_output(f"deleted {uri}")
    finally:
        assert server.stop() == 130


@pytest.mark.parametrize("poll", [False, True], ids=["watchfiles", "polling"])
def test_serve_keeps_serving_a_folder_deleted_and_made_again_and_watches_the_new_one(
    tmp_path, folder, poll
):
    server = start_serve(tmp_path, str(folder), *(["--poll"] if poll else []))
    policy = folder / "policy.md"
    uri = policy.resolve().as_uri()
    try:
        assert run_cli("read", server.url, uri).returncode == 0
        shutil.rmtree(folder)
        server.wait_for_output(f"{folder.resolve()} is gone: no files served")
        gone = run_cli("read", server.url, uri)
        assert gone.returncode == 1 and f"{uri}: not_found" in gone.stderr, gone.stderr

        folder.mkdir()
        policy.write_text("made again")
        server.wait_for_output(f"{folder.resolve()} is back")
        until_sync(lambda: run_cli("read", server.url, uri).stdout == "made again\n", 30.0)
        # The new folder is the one watched: an edit in it is notified.
        edit = run_cli("doctor", server.url, "--uri", uri, "--trigger", python_writes(policy, "v2"))
        assert edit.returncode == 0, edit.stdout + edit.stderr
        assert f"update      {uri} arrived" in edit.stdout
        assert run_cli("read", server.url, uri).stdout == "v2\n"
    finally:
        assert server.stop() == 130
    assert "Traceback" not in server.err.read_text()


def test_serve_over_stdio_answers_read_and_doctor(folder):
    seed = run_cli("read", APPROVAL, "--", *serve_stdio())
    assert seed.returncode == 0, seed.stderr
    assert seed.stdout == SEED_TEXT + "\n"
    doctor = run_cli("doctor", "--", *serve_stdio(str(folder)))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "revision    2026-07-28" in doctor.stdout
    assert "subscribe   yes" in doctor.stdout
    assert (folder / "policy.md").resolve().as_uri() in doctor.stdout


def test_serve_speaks_2025_11_25_and_doctor_names_the_revision(tmp_path):
    server = start_serve(tmp_path, "--revision", "2025-11-25")
    try:
        done = run_cli("read", server.url, APPROVAL)
        assert done.returncode == 0, done.stderr
        assert done.stdout == SEED_TEXT + "\n"
        doctor = run_cli("doctor", server.url)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert "revision    2025-11-25" in doctor.stdout
        assert "subscribe   yes" in doctor.stdout
        # 2025-11-25 has no listen: doctor says what it checked, a subscribe per URI
        assert "subscribe   on the live notification channel in " in doctor.stdout
        assert f"resources/subscribe accepted for ['{APPROVAL}'" in doctor.stdout
        assert "listen      acknowledged" not in doctor.stdout
    finally:
        assert server.stop(signal.SIGINT) == 130
    over_stdio = run_cli("doctor", "--", *serve_stdio("--revision", "2025-11-25"))
    assert over_stdio.returncode == 0, over_stdio.stdout + over_stdio.stderr
    assert "revision    2025-11-25" in over_stdio.stdout


def serve_stdio(*args: str) -> list[str]:
    return [sys.executable, "-m", "freshcache._cli", "serve", "--stdio", *args]


def test_serve_mistakes_are_one_line_and_exit_2(tmp_path):
    missing = run_cli("serve", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        == f"freshcache: {tmp_path / 'nope'} does not exist: give a folder whose files to serve"
    )
    server = start_serve(tmp_path)
    try:
        port = server.url.split(":")[2].split("/")[0]
        taken = run_cli("serve", "--port", port)
        assert taken.returncode == 2
        assert len(taken.stderr.strip().splitlines()) == 1
        assert f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    finally:
        server.stop()


# ------------------------------------------------------------------ not MCP, not there


def test_doctor_says_a_web_server_is_not_mcp_and_exits_2(web):
    done = run_cli("doctor", web.url)
    assert done.returncode == 2, done.stdout
    assert "mcp         no:" in done.stdout
    assert "does not answer MCP" in done.stdout
    assert "(?)" not in done.stdout
    assert "advice      none" not in done.stdout
    assert "<html" not in done.stdout.lower()


def test_doctor_checks_every_url_given_and_exits_with_the_worst(web, served):
    done = run_cli("doctor", served.url, web.url)
    assert done.returncode == 2, done.stdout
    assert f"server      {served.url}" in done.stdout
    assert f"server      {web.url}" in done.stdout
    first, second = done.stdout.split(f"server      {web.url}")
    assert "advice      none" in first
    assert "mcp         no:" in second


def test_doctor_reports_no_update_after_the_trigger_as_a_finding(served, folder):
    uri = (folder / "policy.md").resolve().as_uri()
    done = run_cli("doctor", served.url, "--uri", uri, "--timeout", "2", "--trigger", "true")
    assert done.returncode == 1, done.stdout
    assert "update      none within 2 s of the trigger's start" in done.stdout
    assert "finding     no update arrived within 2 s" in done.stdout
    assert "advice      none" not in done.stdout


def test_doctor_times_the_update_from_the_trigger_start_not_its_end(served, folder):
    policy = folder / "policy.md"
    uri = policy.resolve().as_uri()
    # The trigger changes the file, then keeps running for 8 s more: timed from the
    # trigger's start, the update is heard before the trigger ends (timed from its end,
    # as doctor once did, it would show the 8 s).
    trigger = python_writes(policy, "v3") + " && sleep 8"
    done = run_cli("doctor", served.url, "--uri", uri, "--timeout", "20", "--trigger", trigger)
    assert done.returncode == 0, done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("update "))
    assert int(line.split(" arrived ")[1].split(" ms")[0]) < 8000, line


def test_read_of_a_web_server_shows_no_page_and_exits_1(web):
    done = run_cli("read", web.url, APPROVAL)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "<html" not in done.stderr.lower() and "<!doctype" not in done.stderr.lower()
    assert "a web page, not MCP" in done.stderr


def test_watch_exits_1_when_the_server_never_answered(web):
    unreachable = run_cli(
        "watch",
        f"http://127.0.0.1:{free_port()}/mcp",
        APPROVAL,
        "--duration",
        "1",
        "--timeout",
        "1",
    )
    assert unreachable.returncode == 1
    assert "never answered" in unreachable.stderr
    not_mcp = run_cli("watch", web.url, APPROVAL, "--duration", "1", "--timeout", "1")
    assert not_mcp.returncode == 1
    assert "<html" not in not_mcp.stdout.lower()


# ------------------------------------------------------------------ argument errors


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["watch", "http://127.0.0.1:1/mcp", "u", "--interval", "-1"],
            "argument --interval: '-1' must be a number of seconds above 0",
        ),
        (
            ["watch", "http://127.0.0.1:1/mcp", "u", "--interval", "0"],
            "argument --interval: '0' must be a number of seconds above 0",
        ),
        (["watch", "http://127.0.0.1:1/mcp", "u", "--interval", "nan"], "must be a finite number"),
        (["watch", "http://127.0.0.1:1/mcp", "u", "--duration", "-2"], "argument --duration"),
        (["read", "http://127.0.0.1:1/mcp", "u", "--timeout", "abc"], "'abc' is not a number"),
        (["doctor", "http://127.0.0.1:1/mcp", "--timeout", "0"], "argument --timeout"),
        (["serve", "--port", "70000"], "'70000' is not a port number"),
        (["serve", "--port", "1", "--stdio"], "not allowed with argument"),
        (["acceptance", "--wire", "nowhere"], "invalid choice"),
        (["nosuch"], "invalid choice"),
    ],
    ids=[
        "interval-negative",
        "interval-zero",
        "interval-nan",
        "duration-negative",
        "timeout-text",
        "doctor-timeout-zero",
        "port-range",
        "port-and-stdio",
        "wire",
        "command",
    ],
)
def test_argument_errors_are_one_line_after_the_usage_and_exit_2(argv, message):
    done = run_cli(*argv)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("usage: freshcache")
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and errors[0] == lines[-1], done.stderr
    assert message in errors[0]


@pytest.mark.parametrize("command", ["read", "watch", "doctor"])
def test_a_wrong_endpoint_path_is_one_line_and_exit_2_never_a_traceback(command, served):
    wrong = served.url.replace("/mcp", "/wrong")
    argv = [command, wrong] + ([] if command == "doctor" else [APPROVAL])
    done = run_cli(*argv, *(["--duration", "2"] if command == "watch" else []))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "ExceptionGroup" not in done.stderr
    said = [
        line for line in (done.stdout + done.stderr).splitlines() if "nothing answers MCP" in line
    ]
    assert len(said) == 1, done.stdout + done.stderr  # said once, not logged and then said
    if command != "doctor":  # doctor reports on stdout; read and watch end with one line
        assert done.stderr.splitlines() == said


# ------------------------------------------------------------------ output into a pipe


def test_a_reader_that_stops_early_ends_the_command_quietly_with_141():
    # `freshcache acceptance | head -1`: the reader takes one line and goes away; the
    # command must not print a BrokenPipeError traceback, nor claim it finished (exit 0).
    argv = [sys.executable, "-m", "freshcache._cli", "acceptance", "--wire", "core"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as process:
        assert process.stdout is not None and process.stderr is not None
        try:
            assert process.stdout.readline()
            process.stdout.close()
            err = process.stderr.read().decode()
            code = process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 141, err


# ------------------------------------------------------------------ serve DIR, hardened


def test_serve_never_serves_outside_its_folder_and_a_fifo_never_freezes_the_watcher(
    tmp_path, folder
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret")
    (folder / "leak.txt").symlink_to(outside / "secret.txt")
    (folder / "host").symlink_to("/etc/hostname")
    os.mkfifo(folder / "pipe")  # at start: serve must still list the folder and listen
    server = start_serve(tmp_path, str(folder))
    policy = folder / "policy.md"
    uri = policy.resolve().as_uri()
    try:
        listed = run_cli("list", server.url)
        assert listed.returncode == 0, listed.stderr
        assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == [
            uri,
            (folder / "sub" / "rates.json").resolve().as_uri(),
        ]
        leak = run_cli("read", server.url, (folder / "leak.txt").resolve().as_uri())
        assert leak.returncode == 1 and leak.stdout == "", leak.stdout
        assert "not_found" in leak.stderr
        for name in ("leak.txt", "host", "pipe"):
            assert server.output().count(f"skipped {folder.resolve() / name}: ") == 1, (
                server.output()
            )
        assert "outside" in server.output() and "not a regular file (a FIFO)" in server.output()

        os.mkfifo(folder / "later")  # while serving: the watcher must go on
        server.wait_for_output(f"skipped {folder.resolve() / 'later'}: not a regular file")
        edit = run_cli("doctor", server.url, "--uri", uri, "--trigger", python_writes(policy, "v2"))
        assert edit.returncode == 0, edit.stdout + edit.stderr
        assert f"update      {uri} arrived" in edit.stdout
        assert run_cli("read", server.url, uri).stdout == "v2\n"
    finally:
        code = server.stop(signal.SIGINT)
    assert code == 130
    assert "Traceback" not in server.err.read_text()


def test_serve_skips_a_file_over_max_file_bytes_naming_the_option(tmp_path, folder):
    (folder / "big.bin").write_bytes(b"\0" * 4096)
    server = start_serve(tmp_path, str(folder), "--max-file-bytes", "1k")
    try:
        server.wait_for_output(
            f"skipped {folder.resolve() / 'big.bin'}: 4096 bytes, over the 1024-byte limit "
            "(freshcache serve --max-file-bytes N raises it)"
        )
        assert "big.bin" not in run_cli("list", server.url).stdout
    finally:
        server.stop()


def test_list_prints_the_percent_encoded_uris_that_read_takes(tmp_path, folder):
    odd = folder / "my notes é.md"
    odd.write_text("spaced")
    server = start_serve(tmp_path, str(folder))
    try:
        listed = run_cli("list", server.url)
        assert listed.returncode == 0, listed.stderr
        uris = [line.split("\t")[0] for line in listed.stdout.splitlines()]
        assert odd.resolve().as_uri() in uris
        assert any(u.endswith("/my%20notes%20%C3%A9.md") for u in uris), uris
        assert run_cli("read", server.url, odd.resolve().as_uri()).stdout == "spaced\n"
        as_json = run_cli("list", server.url, "--json")
        assert odd.resolve().as_uri() in as_json.stdout and '"state": "fresh"' in as_json.stdout
    finally:
        server.stop()


def test_read_of_a_blob_says_its_type_and_size_and_output_writes_its_bytes(tmp_path, folder):
    image = folder / "dot.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n\xff\x00")
    server = start_serve(tmp_path, str(folder))
    uri = image.resolve().as_uri()
    try:
        shown = run_cli("read", server.url, uri)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == ""
        assert "a blob: image/png, 10 bytes (--output FILE writes its bytes)" in shown.stderr
        as_json = run_cli("read", server.url, uri, "--json")
        assert '"type": "blob"' in as_json.stdout and '"bytes": 10' in as_json.stdout
        assert '"mimeType": "image/png"' in as_json.stdout
        written = run_cli("read", server.url, uri, "--output", str(tmp_path / "copy.png"))
        assert written.returncode == 0, written.stderr
        assert (tmp_path / "copy.png").read_bytes() == image.read_bytes()
        assert f"written to {tmp_path / 'copy.png'}" in written.stderr
    finally:
        server.stop()


# ------------------------------------------------------------------ doctor's findings


def test_doctor_finds_a_tested_uri_that_is_not_found_or_denied(sdk_server):
    sdk_server.control("deny", uri=APPROVAL)
    done = run_cli("doctor", sdk_server.url, "--uri", "guide://nope", "--uri", APPROVAL)
    assert done.returncode == 1, done.stdout
    assert "finding     guide://nope does not exist (not_found)" in done.stdout
    assert f"finding     {APPROVAL} is denied to doctor (denied)" in done.stdout
    assert "advice      none" not in done.stdout


def test_doctor_help_says_which_resources_it_tests():
    done = run_cli("doctor", "--help")
    assert "default: the first three listed" in " ".join(done.stdout.split())


def test_doctor_reports_a_failed_trigger_at_once_not_after_the_timeout(served, folder):
    uri = (folder / "policy.md").resolve().as_uri()
    # With --timeout 600 a doctor that waited for an update after the trigger failed
    # would outlive run_cli's own deadline.
    done = run_cli(
        "doctor", served.url, "--uri", uri, "--timeout", "600", "--trigger", "exit 3", timeout=120
    )
    assert done.returncode == 1, done.stdout
    assert "trigger     exited with 3" in done.stdout
    assert "update      not waited for: the trigger failed" in done.stdout
    assert "finding     the trigger command failed (exit 3)" in done.stdout


# ------------------------------------------------------------------ no traceback, ever

BAD_URLS = [
    "http://127.0.0.1:99999/mcp",
    "http://127.0.0.1:abc/mcp",
    "http://127.0.0.1:-1/mcp",
    "http://127.0.0.1:0/mcp",
    "http://",
    "http://[::1/mcp",
    "http://exa mple.com/mcp",
    "HTTP://127.0.0.1:8000/mcp",
    "127.0.0.1:8000/mcp",
    "",
]
BAD_URIS = ["", "not a uri", "guide://a\x01b", "file:///%zz", "x" * 5000, "-"]


def _bad_inputs(url: str, group: str) -> list[list[str]]:
    """Every command fed malformed URLs and ports (``group`` ``urls`` and the command),
    URIs (``uris``) or options (``options``); ``url``: a live server."""
    cases: list[list[str]] = [
        argv
        for bad in BAD_URLS
        for argv in (
            ["read", bad, APPROVAL, "--timeout", "1"],
            ["watch", bad, APPROVAL, "--duration", "0.5", "--timeout", "1"],
            ["doctor", bad, "--timeout", "1"],
            ["list", bad, "--timeout", "1"],
        )
        if group == f"urls {argv[0]}"
    ]
    for uri in BAD_URIS if group == "uris" else ():
        cases += [
            ["read", url, uri, "--timeout", "2"],
            ["watch", url, uri, "--duration", "0.5", "--timeout", "2"],
            ["doctor", url, "--uri", uri, "--timeout", "2"],
        ]
    options = [
        ["read", url, APPROVAL, "--timeout", "1e999"],
        ["read", url, APPROVAL, "--timeout", "-0"],
        ["read", url, APPROVAL, "--max-frame-bytes", "12"],
        ["read", url, APPROVAL, "--max-frame-bytes", "lots"],
        ["read", url, APPROVAL, "--output", "/no/such/folder/file"],
        ["read", url, APPROVAL, "--output", "/"],
        ["watch", url, APPROVAL, "--interval", "inf"],
        ["list", url, url],
        ["doctor", url, "--trigger"],
        ["serve", "--port", "-1"],
        ["serve", "--port", "99999"],
        ["serve", "--max-file-bytes", "1"],
        ["serve", "/no/such/folder"],
        ["serve", __file__],
        ["acceptance", "/no/such/table.md"],
        ["acceptance", "--only", "no-such-row", "--wire", "core"],
        ["acceptance", "--junit", "/no/such/folder/j.xml", "--wire", "core"],
        ["acceptance", "--client", "nosuch"],
        ["acceptance", "--client-cmd", ""],
        ["acceptance", "--client-cmd", "/no/such/driver"],
        ["read", url],
        ["--no-such-option"],
    ]
    return cases + (options if group == "options" else [])


GROUPS = ("urls read", "urls watch", "urls doctor", "urls list", "uris", "options")


def test_no_command_prints_a_traceback_whatever_the_input(served):
    # Exit 0 is right for some (a watch that heard the server answer not_found); 70,
    # an exception freshcache did not expect, and a traceback never are. `main` runs
    # in-process for each input; the real entry points, run as programs, are the next
    # test's.
    failures = []
    for group in GROUPS:
        for argv in _bad_inputs(served.url, group):
            done = run_main_here(argv)
            said = done.stdout + done.stderr
            if done.returncode not in (0, 1, 2) or "Traceback" in said or "unexpected" in said:
                failures.append(f"{argv!r}: exit {done.returncode}: {said[-300:]!r}")
    assert not failures, "\n".join(failures)


def test_the_installed_programs_print_no_traceback_for_bad_input(served):
    """The console script and ``python -m freshcache._cli``, as a user starts them: a bad
    URL, a bad URI and a bad option each end in one line and a usage exit status."""
    script = Path(sys.executable).with_name("freshcache")
    assert script.exists(), f"no console script next to {sys.executable}"
    cases = [
        [str(script), "read", "http://127.0.0.1:abc/mcp", APPROVAL, "--timeout", "1"],
        [str(script), "doctor", served.url, "--uri", "guide://a\x01b", "--timeout", "2"],
        [sys.executable, "-m", "freshcache._cli", "read", served.url, APPROVAL, "--timeout", "-0"],
    ]
    for argv in cases:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        said = done.stdout + done.stderr
        assert done.returncode in (1, 2), f"{argv!r}: exit {done.returncode}: {said!r}"
        assert "Traceback" not in said and "unexpected" not in said, said


def test_an_out_of_range_port_is_a_usage_error_in_one_line():
    for command in (
        ["read", "http://127.0.0.1:99999/mcp", APPROVAL],
        ["doctor", "http://127.0.0.1:99999/mcp"],
    ):
        done = run_cli(*command)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.splitlines() == [
            "freshcache: 'http://127.0.0.1:99999/mcp' is not a usable URL (Port out of range "
            "0-65535): the port is a number 1-65535, as in http://127.0.0.1:8000/mcp"
        ]
        assert done.stdout == ""


def test_a_misspelled_alias_in_a_table_is_a_table_error_at_its_line(tmp_path):
    table = tmp_path / "mine.md"
    table.write_text(
        "| id | source | steps | expect |\n|---|---|---|---|\n"
        "| mine-1 | a test | read selectd | fresh v1 |\n"
    )
    done = run_cli("acceptance", str(table))
    assert done.returncode == 2
    assert (
        f"{table}:3: steps: 'selectd' is neither an alias (selected, other, extra) nor a URI "
        "with a scheme (guide://..., file:///...)"
    ) in done.stderr


def test_vv_shows_freshcaches_own_debug_lines(served, folder):
    uri = (folder / "policy.md").resolve().as_uri()
    done = run_cli("-vv", "read", served.url, uri)
    assert done.returncode == 0, done.stderr
    assert f"freshcache.telemetry: request resources/read {uri}" in done.stderr
    assert "freshcache.telemetry: server read" in done.stderr
    quiet = run_cli("read", served.url, uri)
    assert "freshcache.telemetry" not in quiet.stderr


# ------------------------------------------------------------------ Ctrl-C: one rule


def test_ctrl_c_during_start_up_is_one_line_and_exit_130(tmp_path):
    # A server that accepts the connection and never answers: doctor is inside its
    # start-up (discovery) when Ctrl-C comes, and it is known to be there once the
    # connection was accepted.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        process = subprocess.Popen(
            [sys.executable, "-m", "freshcache._cli", "doctor", url, "--timeout", "300"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            listener.settimeout(60)
            connection, _ = listener.accept()
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        connection.close()
    assert process.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == "freshcache: interrupted"


@pytest.mark.skipif(shutil.which("bash") is None, reason="the example is a bash line")
def test_the_doctor_trigger_example_in_the_docs_writes_what_it_says(tmp_path):
    # Before: "$800" in double quotes was bash's $8 and "00": "Orders over 00 ...".
    docs = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    (line,) = [
        ln for ln in docs.splitlines() if ln.startswith("$ freshcache doctor") and "--trigger" in ln
    ]
    trigger = line.split("--trigger ", 1)[1]
    (tmp_path / "notes").mkdir()
    # bash reads the line as the reader types it; doctor runs the trigger with a shell.
    subprocess.run(["bash", "-c", f"sh -c {trigger}"], cwd=tmp_path, check=True, timeout=60)
    written = (tmp_path / "notes" / "approval.md").read_text()
    assert written == "Orders over $800 need a manager.\n"


EARLY_CTRL_C = '''
import importlib.abc, os, signal, sys

class CtrlCWhileImporting(importlib.abc.MetaPathFinder):
    """Ctrl-C while Python imports the module the test names: the command line's
    first moments, deterministically (a timed signal lands anywhere in them)."""

    def find_spec(self, name, path=None, target=None):
        if name == os.environ["CTRL_C_AT"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlCWhileImporting())
'''


@pytest.mark.parametrize("module", ["freshcache._core", "freshcache._cli", "argparse"])
@pytest.mark.parametrize("command", [["list", "http://127.0.0.1:9/mcp"], ["serve", "--port", "0"]])
@pytest.mark.parametrize("how", ["-m", "script"])
def test_an_early_ctrl_c_is_one_line_and_exit_130(tmp_path, module, command, how):
    # Before: a traceback from inside the import (31 lines), exit 1 or killed by SIGINT.
    (tmp_path / "sitecustomize.py").write_text(EARLY_CTRL_C)
    env = {**os.environ, "CTRL_C_AT": module}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    script = tmp_path / "freshcache"  # what the console script does, under its name
    script.write_text("import sys\nfrom freshcache._cli import main\nsys.exit(main())\n")
    argv = [sys.executable, *(["-m", "freshcache._cli"] if how == "-m" else [str(script)])]
    done = subprocess.run(
        [*argv, *command], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "freshcache: interrupted"


def test_watch_stopped_by_ctrl_c_exits_130_like_every_command(served, folder):
    uri = (folder / "policy.md").resolve().as_uri()
    out = folder.parent / "watch.out"
    with out.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "freshcache._cli", "watch", served.url, uri],
            stdout=sink,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        until_sync(lambda: f"{uri}: fresh" in out.read_text(), 60.0)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 130
    assert b"Traceback" not in err


def test_watch_prints_a_change_as_the_cache_hears_it_not_at_its_next_look(served, folder):
    # --interval 120: a look every two minutes cannot explain a line within seconds;
    # the change the cache heard on its stream does (before: the next look, 0.5 s by
    # default, so 0-500 ms after the edit; measured now about 100 ms on serve DIR).
    policy = folder / "policy.md"
    uri = policy.resolve().as_uri()
    out = folder.parent / "watch.out"
    with out.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "freshcache._cli",
                "watch",
                served.url,
                uri,
                "--interval",
                "120",
            ],
            stdout=sink,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        until_sync(lambda: "-- stream live" in out.read_text(), 60.0)
        first = [line for line in out.read_text().splitlines() if f"{uri}: fresh" in line]
        assert len(first) == 1
        policy.write_text("# Policy\nOrders over $800 need a manager.\n")
        fresh = lambda: [ln for ln in out.read_text().splitlines() if f"{uri}: fresh" in ln]  # noqa: E731
        until_sync(lambda: len(fresh()) == 2, 30.0)
        assert (
            fresh()[1].split(": fresh ")[1].split()[0] != first[0].split(": fresh ")[1].split()[0]
        )
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


# ------------------------------------------------------------------ a driver that breaks


def _driver(tmp_path: Path, after_hello: str) -> str:
    script = tmp_path / "driver.py"
    script.write_text(
        "import json, sys, time\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if m['op'] == 'hello':\n"
        "        print(json.dumps({'id': m['id'], 'protocol': 1, 'client': 'broken 1'}), flush=True)\n"
        f"    else:\n        {after_hello}\n"
    )
    return f"{sys.executable} {script}"


def test_a_driver_that_exits_gets_a_verdict_per_case_and_the_run_its_summary(tmp_path):
    ids = ["seed-2", "seed-4", "seed-5", "seed-6", "seed-9"]
    done = run_cli(
        "acceptance",
        "--client-cmd",
        _driver(tmp_path, "sys.exit(3)"),
        "--wire",
        "http",
        *[arg for row in ids for arg in ("--only", row)],
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "RuntimeError" not in done.stdout + done.stderr
    summary = done.stdout.split("3 failed:")[1]  # each failed case once, with its lines
    assert summary.count("    - the driver exited with status 3 during 'open'") == 3
    assert summary.count("    class     no state") == 3
    # The rows after the third failure are not played, and never counted as failed.
    assert done.stdout.count("        not played: the driver failed the last 3 cases") == 2
    assert "http:broken: 0/5 passed, 2 not played; failed: 3 no state" in done.stdout
    assert "0 passed, 3 failed, 2 not played" in done.stdout


def test_a_driver_that_does_not_close_a_row_is_restarted_and_later_rows_play(tmp_path):
    # The first driver process hangs on its first close; the row gets its own verdict
    # within a bounded time, and the next row is played by a driver started afresh
    # (before: it was refused, "a row is open already").
    flag = tmp_path / "hung-once"
    script = tmp_path / "driver.py"
    script.write_text(
        "import json, os, sys, time\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    op = m['op']\n"
        "    if op == 'hello':\n"
        "        a = {'protocol': 1, 'client': 'sticky 1'}\n"
        f"    elif op == 'close' and not os.path.exists({str(flag)!r}):\n"
        f"        open({str(flag)!r}, 'w').close()\n"
        "        time.sleep(3600)\n"
        "    elif op == 'read':\n"
        "        a = {'text': m['uri'] + ' @ v1'}\n"
        "    else:\n"
        "        a = {'ok': True}\n"
        "    print(json.dumps({'id': m['id'], **a}), flush=True)\n"
    )
    done = run_cli(
        "acceptance",
        "--client-cmd",
        f"{sys.executable} {script}",
        "--wire",
        "http",
        "--only",
        "seed-4",
        "--only",
        "seed-6",
        "--json",
        timeout=300,
    )
    report = json.loads(done.stdout)
    first, second = report["cases"]
    assert not first["passed"] and first["not_played"] is None
    assert any(f.startswith("the driver") and "close" in f for f in first["failures"]), first
    assert second["not_played"] is None
    assert not any("a row is open already" in f for f in second["failures"]), second
    assert not any(f.startswith("the driver") for f in second["failures"]), second


def test_a_driver_that_hangs_is_stopped_and_the_case_says_so(tmp_path):
    # --timeout 1: the case's own deadline (1 s per step, plus 2 s) cuts the wait on
    # 'open' (the default, 10 s per step, would be sat out the same way for 50 s).
    done = run_cli(
        "acceptance",
        "--client-cmd",
        _driver(tmp_path, "time.sleep(3600)"),
        "--wire",
        "http",
        "--only",
        "seed-2",
        "--timeout",
        "1",
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the driver gave no answer to 'open' within" in done.stdout
    assert "1 failed" in done.stdout and "Traceback" not in done.stderr


def test_the_json_report_gives_each_failure_its_class(tmp_path):
    done = run_cli(
        "acceptance",
        "--client-cmd",
        _driver(tmp_path, "sys.exit(3)"),
        "--wire",
        "http",
        "--only",
        "seed-2",
        "--only",
        "seed-4",
        "--json",
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert [f["class"] for f in report["failures"]] == ["no state", "no state"]
    assert report["summary"]["classes"]["no state"] == 2
    assert report["summary"]["classes"]["old text"] == 0


@pytest.mark.parametrize(
    ("version", "legacy"),
    [("2026-07-28", False), ("2025-11-25", True), ("2025-06-18", True), (None, False)],
    ids=["2026", "2025-11-25", "2025-06-18", "none-in-common"],
)
def test_doctor_speaks_of_the_2025_channel_only_for_a_2025_revision(version, legacy):
    # No revision in common is not "an older revision": its listen is not the 2025
    # channel of resources/subscribe.
    from freshcache._doctor import speaks_2025
    from freshcache._sources._source import ServerInfo

    assert speaks_2025(ServerInfo(reachable=True, protocol_version=version)) is legacy


TOOLS_ONLY = Path(__file__).parent / "fixtures" / "tools_only_server.py"


def test_doctor_knows_a_tools_only_server():
    # Issue 34: a server without the resources capability (server-filesystem, or this
    # fixture on the SDK's low-level server) is a normal server, not "not MCP" (exit 2).
    done = run_cli("doctor", "--", sys.executable, str(TOOLS_ONLY))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resources   none offered" in done.stdout
    assert "tools       1 listed; listChanged no" in done.stdout
    assert "mcp         no" not in done.stdout and "list        " not in done.stdout
