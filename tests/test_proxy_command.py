"""``freshcache proxy`` as a command: user mistakes are one line and exit 2 (a config
file's mistakes name ``file:line``), without the SDK it names the install command,
SIGTERM and Ctrl-C end it cleanly (143, 130), a host closing stdin ends it with 0;
and `Notices`, the rule of when a host is told (sans-IO)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from freshcache._errors import ConfigurationError
from freshcache._proxy._config import from_file
from freshcache._proxy._notices import Notices
from tests.polling import scaled
from tests.proxy_support import ENV, proxy_command, running_proxy


def _proxy(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        proxy_command(*args),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
        env=ENV,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("freshcache: ")
    return lines[0]


@pytest.mark.parametrize(
    ("config", "line", "says"),
    [
        ('{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}', 3, "not valid JSON"),
        (
            '{\n  "mcpServers": {\n    "a": {"url": "http://h/mcp"},\n    "b": {"colour": 1}\n  }\n}',
            4,
            "unknown key 'colour'",
        ),
        ('{\n  "mcpServers": {\n    "web": {"url": "ftp://h/x"}\n  }\n}', 3, "not an http(s) URL"),
        (
            '{\n  "mcpServers": {\n    "tool": {"command": "no-such-command-here"}\n  }\n}',
            3,
            "not a command found on PATH",
        ),
        (
            '{\n  "mcpServers": {\n    "a": {"url": "http://h/mcp", "prefix": "x"},\n    "b": {"url": "http://h/mcp", "prefix": "x"}\n  }\n}',
            3,
            "needs a prefix",
        ),
        ('{"other": 1}', 1, "no servers"),
    ],
)
def test_a_config_mistake_is_one_line_naming_file_and_line(
    tmp_path: Path, config: str, line: int, says: str
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(config)
    with pytest.raises(ConfigurationError) as mistake:
        from_file(path)
    assert str(mistake.value).startswith(f"{path}:{line}: ")
    assert says in str(mistake.value)


def test_the_command_says_a_config_mistake_in_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from freshcache._cli import main

    path = tmp_path / "mcp.json"
    path.write_text('{\n  "mcpServers": {\n    "a": {"command": 1}\n  }\n}')

    def said(*args: str) -> str:
        code = main(["proxy", *args])
        done = subprocess.CompletedProcess(args, code, "", capsys.readouterr().err)
        return _one_line(done)

    assert f"{path}:3: " in said("--config", str(path))
    assert "name an upstream" in said()
    assert "not both" in said("--config", str(path), "http://127.0.0.1:9/mcp")
    assert "one upstream URL" in said("http://127.0.0.1:9/mcp", "http://127.0.0.1:8/mcp")
    assert "HOST:PORT" in _one_line(_proxy("--http", "nowhere", "http://127.0.0.1:9/mcp"))


def test_a_config_in_the_hosts_format_gives_every_server_a_prefix(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": sys.executable, "args": ["-m", "x"], "env": {"A": "1"}},
                    "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X": "y"}},
                    "off": {"url": "http://127.0.0.1:9/mcp", "disabled": True},
                }
            }
        )
    )
    files, web = from_file(path)
    assert (files.prefix, files.command, dict(files.env)) == (
        "files__",
        (sys.executable, "-m", "x"),
        {"A": "1"},
    )
    assert (web.prefix, web.url, dict(web.headers)) == (
        "web__",
        "http://127.0.0.1:9/mcp",
        {"X": "y"},
    )


def test_without_the_sdk_it_names_the_install_command() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None; sys.modules['mcp.server'] = None\n"
        "from freshcache._cli import main\n"
        "sys.exit(main(['proxy', 'http://127.0.0.1:9/mcp']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=False
    )
    assert "pip install 'freshcache[proxy]'" in _one_line(done)


def test_help_says_how_a_host_uses_it() -> None:
    done = _proxy("--help")
    assert done.returncode == 0
    for words in ("--config FILE", "--http HOST:PORT", "--meta-tools", '"proxy", "--", "npx"'):
        assert words in " ".join(done.stdout.split()) or words in done.stdout


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_signal_ends_it_cleanly(tmp_path: Path, transport: str, sig: int, code: int) -> None:
    args = ["--http", "127.0.0.1:0"] if transport == "http" else []
    proxy = running_proxy(tmp_path, *args, "http://127.0.0.1:9/mcp")
    with proxy as (process, _):
        if transport == "stdio":
            from tests.polling import until_sync

            until_sync(lambda: "on stdio" in proxy.output(), scaled(30))
        process.send_signal(sig)
        assert process.wait(timeout=scaled(20)) == code
    assert "Traceback" not in proxy.output()
    assert proxy.output().rstrip().endswith("freshcache proxy: stopped")


def test_a_host_closing_stdin_ends_it_with_0() -> None:
    done = _proxy("http://127.0.0.1:9/mcp")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------------- Notices


def test_a_change_heard_is_told_at_once_and_the_reread_is_not_told_again() -> None:
    notices = Notices()
    notices.given("u", "v1")
    assert notices.change("u", "awaiting_fresh_source", None, "invalidated")
    assert not notices.change("u", "fresh", "v2", None)  # its next read gets this
    assert not notices.change("u", "fresh", "v2", None)


def test_a_lost_stream_is_told_only_when_the_reread_differs() -> None:
    notices = Notices()
    notices.given("same", "v1")
    notices.given("other", "v1")
    for key in ("same", "other"):
        assert not notices.change(key, "awaiting_fresh_source", None, "stream_lost")
    assert not notices.change("same", "fresh", "v1", None)
    assert notices.change("other", "fresh", "v2", None)


def test_an_acknowledgment_reread_is_told_only_when_it_differs_or_fails() -> None:
    """A new stream re-proves a copy read before it (``invalidated``, caused by
    ``acknowledged``): nothing was heard to change, so, as after a lost stream, the
    re-read decides (the same version quiet), never the ack itself."""
    notices = Notices()
    for key in ("same", "other", "failed"):
        notices.given(key, "v1")
        assert not notices.change(key, "awaiting_fresh_source", None, "invalidated", True)
    assert not notices.change("same", "fresh", "v1", None)
    assert notices.change("other", "fresh", "v2", None)
    assert notices.change("failed", "awaiting_fresh_source", None, "timeout")
    # A change heard is still told at once, whatever preceded it.
    assert notices.change("same", "awaiting_fresh_source", None, "invalidated", False)


def test_a_lost_stream_never_reread_is_told_once_as_unproven() -> None:
    notices = Notices()
    notices.given("u", "v1")
    assert not notices.change("u", "awaiting_fresh_source", None, "stream_lost")
    assert notices.unproven("u")
    assert not notices.unproven("u")


def test_a_lost_stream_re_proven_is_not_unproven_when_its_copy_expires_later() -> None:
    """The re-read after the reconnect was fresh and the same: a proof, even once its
    ``ttlMs`` has passed by the proxy's timeout (a catalog served with a short ``ttlMs``
    is ``expired`` between host requests)."""
    notices = Notices()
    notices.given("u", "v1")
    assert not notices.change("u", "awaiting_fresh_source", None, "stream_lost")
    assert not notices.change("u", "fresh", "v1", None)
    assert not notices.change("u", "awaiting_fresh_source", None, "expired")
    assert not notices.unproven("u")


def test_a_second_lost_stream_after_a_re_proof_is_unproven_again() -> None:
    notices = Notices()
    notices.given("u", "v1")
    assert not notices.change("u", "awaiting_fresh_source", None, "stream_lost")
    assert not notices.change("u", "fresh", "v1", None)
    assert not notices.unproven("u")  # the first loss's timeout: re-proven
    assert not notices.change("u", "awaiting_fresh_source", None, "stream_lost")
    assert notices.unproven("u")  # the second's: never re-proven
    assert not notices.unproven("u")


def test_what_no_host_holds_is_not_told_and_an_error_given_is_told_when_fresh_again() -> None:
    notices = Notices()
    assert not notices.change("never-read", "awaiting_fresh_source", None, "invalidated")
    notices.given("u", None, "awaiting_fresh_source")
    assert not notices.unproven("u")
    assert notices.change("u", "fresh", "v1", None)


def test_a_subscription_is_told_of_changes_even_before_any_read() -> None:
    notices = Notices()
    notices.watch("u")
    assert notices.change("u", "awaiting_fresh_source", None, "invalidated")
    assert sorted(notices.everything()) == ["u"]


def test_a_malformed_message_from_the_host_gets_a_json_rpc_error() -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    lines = [
        json.dumps(hello),
        '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        '{"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": 7}',
        "this is not JSON",
    ]
    process = subprocess.Popen(
        proxy_command("http://127.0.0.1:9/mcp"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=ENV,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write("\n".join(lines) + "\n")
        process.stdin.flush()
        answers = [json.loads(process.stdout.readline()) for _ in range(3)]
    finally:
        process.stdin.close()
        process.wait(timeout=scaled(30))
        process.stdout.close()
    errors = {a["id"]: a["error"]["code"] for a in answers if "error" in a}
    assert errors == {2: -32600, None: -32700}, answers
    assert process.returncode == 0


def test_import_freshcache_does_not_load_the_proxy_or_the_sdk() -> None:
    code = (
        "import sys, freshcache; freshcache.FreshCache\n"
        "assert not any(m.startswith(('freshcache._proxy', 'mcp')) for m in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
