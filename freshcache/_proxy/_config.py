"""What the proxy sits in front of: the upstreams, from the command line or a host's
``mcpServers`` JSON (the file Claude Desktop, Claude Code, Cursor and VS Code already use).

A stdio entry has ``command`` (and ``args``, ``env``, ``cwd``); an HTTP entry has
``url`` (and ``headers``). freshcache reads one key of its own: ``prefix``, put before
the entry's tool and prompt names (default: none with one upstream, ``NAME__`` with
several), so names from different upstreams cannot collide. Every mistake is one line
naming ``file:line`` (`ConfigurationError`).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .._errors import ConfigurationError

_KEYS_STDIO = frozenset({"command", "args", "env", "cwd"})
_KEYS_HTTP = frozenset({"url", "headers"})
_KEYS_COMMON = frozenset({"type", "prefix", "disabled", "description", "timeout"})
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class Upstream:
    """One server behind the proxy."""

    name: str
    prefix: str = ""
    command: tuple[str, ...] = ()
    """The stdio server's command line (``command`` then ``args``); empty for HTTP."""
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_http(self) -> bool:
        return self.url is not None


def upstreams_of(args: argparse.Namespace) -> list[Upstream]:
    """The upstreams ``freshcache proxy`` was given: ``URL``, ``-- COMMAND ...`` or
    ``--config FILE``."""
    target: list[str] = list(args.target)
    if args.command_line is not None:
        target = [*target, "--", *args.command_line]
    if args.config is not None:
        if target:
            raise ConfigurationError(
                "give --config FILE or one upstream (URL or -- COMMAND), not both"
            )
        return from_file(Path(args.config))
    return from_command_line(target)


def from_command_line(target: Sequence[str]) -> list[Upstream]:
    """``URL`` or ``-- COMMAND ARGS...`` (already split by the CLI): one upstream."""
    if not target:
        raise ConfigurationError(
            "name an upstream: a URL (http://...), -- COMMAND ARGS..., or --config FILE"
        )
    if target[0] == "--":
        command = tuple(target[1:])
        if not command:
            raise ConfigurationError("after '--' give the command that starts the stdio server")
        _check_command(command[0], "the command after '--'")
        return [Upstream(name=Path(command[0]).name or "upstream", command=command)]
    if len(target) > 1:
        raise ConfigurationError(
            f"one upstream URL, got {len(target)} words ({' '.join(target)}); "
            "several upstreams go in --config FILE"
        )
    url = target[0]
    problem = _url_problem(url)
    if problem:
        raise ConfigurationError(problem)
    return [Upstream(name=urlsplit(url).hostname or "upstream", url=url)]


def from_file(path: Path) -> list[Upstream]:
    """Every enabled entry of the ``mcpServers`` (or VS Code's ``servers``) object."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot read the config file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"{path}:1: the config file is not UTF-8 text") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    where = _Locator(path, text)
    if not isinstance(document, dict):
        raise ConfigurationError(f"{where.at(None)}: the config is a JSON object with mcpServers")
    servers = document.get("mcpServers", document.get("servers"))
    if not isinstance(servers, dict) or not servers:
        raise ConfigurationError(
            f"{where.at('mcpServers')}: no servers: the config needs "
            '{"mcpServers": {"NAME": {"command": ...} or {"url": ...}}}'
        )
    upstreams = []
    for name, entry in servers.items():
        upstream = _entry(name, entry, where)
        if upstream is not None:
            upstreams.append(upstream)
    if not upstreams:
        raise ConfigurationError(f"{where.at('mcpServers')}: every server is disabled")
    several = len(upstreams) > 1
    named = [u if u.prefix or not several else _with_prefix(u, f"{u.name}__") for u in upstreams]
    prefixes = [u.prefix for u in named]
    for upstream in named:
        clash = [p for p in prefixes if p != upstream.prefix and p.startswith(upstream.prefix)]
        if several and (not upstream.prefix or clash or prefixes.count(upstream.prefix) > 1):
            raise ConfigurationError(
                f"{where.at(upstream.name)}: server {upstream.name!r} needs a prefix that no "
                "other server's prefix starts with, so tool names cannot collide"
            )
    return named


def _with_prefix(upstream: Upstream, prefix: str) -> Upstream:
    return Upstream(
        name=upstream.name,
        prefix=prefix,
        command=upstream.command,
        env=upstream.env,
        cwd=upstream.cwd,
        url=upstream.url,
        headers=upstream.headers,
    )


class _Locator:
    """``file:line`` of a key, for messages (the first line naming it)."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def at(self, key: str | None) -> str:
        if key is not None:
            needle = json.dumps(key)
            for number, line in enumerate(self.lines, 1):
                if needle in line:
                    return f"{self.path}:{number}"
        return f"{self.path}:1"


def _entry(name: str, entry: object, where: _Locator) -> Upstream | None:
    at = where.at(name)
    if not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"{at}: server name {name!r}: use letters, digits, '_', '-' or '.' (1-64)"
        )
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{at}: server {name!r} is not a JSON object")
    if entry.get("disabled") is True:
        return None
    unknown = set(entry) - _KEYS_STDIO - _KEYS_HTTP - _KEYS_COMMON
    if unknown:
        raise ConfigurationError(f"{at}: server {name!r}: unknown key {sorted(unknown)[0]!r}")
    kind = entry.get("type")
    if kind == "sse":
        raise ConfigurationError(
            f"{at}: server {name!r}: the old SSE transport is not supported; "
            "give its Streamable HTTP URL"
        )
    prefix = entry.get("prefix", "")
    if not isinstance(prefix, str) or (prefix and not _NAME.fullmatch(prefix)):
        raise ConfigurationError(
            f"{at}: server {name!r}: prefix is letters, digits, '_', '-' or '.'"
        )
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise ConfigurationError(
            f'{at}: server {name!r} needs exactly one of "command" (stdio) or "url" (HTTP)'
        )
    if has_url:
        url = entry["url"]
        problem = _url_problem(url) if isinstance(url, str) else "url is not a string"
        if problem:
            raise ConfigurationError(f"{at}: server {name!r}: {problem}")
        headers = _strings(entry.get("headers", {}), f"{at}: server {name!r}: headers")
        return Upstream(name=name, prefix=prefix, url=url, headers=headers)
    command = entry["command"]
    args = entry.get("args", [])
    if not isinstance(command, str) or not command:
        raise ConfigurationError(f"{at}: server {name!r}: command is a non-empty string")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigurationError(f"{at}: server {name!r}: args is a list of strings")
    env = _strings(entry.get("env", {}), f"{at}: server {name!r}: env")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ConfigurationError(f"{at}: server {name!r}: cwd is a string")
    _check_command(command, f"{at}: server {name!r}: command")
    return Upstream(name=name, prefix=prefix, command=(command, *args), env=env, cwd=cwd)


def _strings(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigurationError(f"{what} is an object of strings")
    return dict(value)


def _check_command(command: str, what: str) -> None:
    if shutil.which(command) is None:
        raise ConfigurationError(
            f"{what}: {command!r} is not a command found on PATH (or not an executable file)"
        )


def _url_problem(url: str) -> str | None:
    if not url.startswith(("http://", "https://")):
        return f"{url!r} is not an http(s) URL: try http://127.0.0.1:8000/mcp or -- COMMAND"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"{url!r} is not a usable URL ({exc})"
    if not parts.hostname or port == 0:
        return f"{url!r} names no usable host and port"
    return None


__all__ = ["Upstream", "from_command_line", "from_file", "upstreams_of"]
