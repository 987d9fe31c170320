"""The step vocabulary of acceptance tables: plain phrases, parsed into small types.

Every phrase names something that happens at the server or the client, never a
transport detail, so one row runs against the engine and over every wire. URIs may
be written out or by alias: ``selected`` (the resource the agent relies on),
``other`` (a resource the cache also read, not selected), ``extra`` (a third one).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from freshcache import CatalogKind, ConfigurationError
from freshcache.testing import Fault

ALIASES = {
    "selected": "guide://shipping/approval",
    "other": "guide://shipping/rates",
    "extra": "guide://shipping/holidays",
}


def catalog_kind(kind: str) -> CatalogKind:
    """``kind`` as a `CatalogKind` (``tools``, ``prompts``, ``resource_templates``)."""
    kinds: tuple[CatalogKind, ...] = get_args(CatalogKind)
    if kind not in kinds:
        raise ConfigurationError(f"catalog kind must be one of {kinds}, got {kind!r}")
    return kind


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def resolve(word: str) -> str:
    """An alias or a literal URI; a bare word that is neither (``selectd``) is a
    mistake in the table, reported at its line, not a URI that fails later."""
    if word in ALIASES:
        return ALIASES[word]
    if not _SCHEME.match(word):
        raise ValueError(
            f"{word!r} is neither an alias ({', '.join(ALIASES)}) nor a URI with a "
            "scheme (guide://..., file:///...)"
        )
    return word


def text_for(uri: str, version: str) -> str:
    """The text the reference server holds for ``uri`` at version label ``version``."""
    return f"{uri} @ {version}"


# --- given: how the case starts (before the seed situation is set up) ---


@dataclass(frozen=True, slots=True)
class Given:
    """A change to the starting situation."""

    what: Literal[
        "no_listen",
        "ack_omits",
        "not_cached",
        "ttl",
        "subscription_backed",
        "ttl_for_uncovered",
        "stale_allowed",
        "public_shared",
        "scope_public",
        "also_selected",
        "principal",
        "page_size",
        "no_list_changed",
        "store_entries",
        "later_pages_ttl",
        "acks_held",
        "fleet",
        "pushed_bodies",
        "catalog_page_size",
        "catalog_later_ttl",
        "catalog_later_private",
        "catalog_public",
        "stale_catalogs",
        "nothing_selected",
        "catalog_ttl",
        "later_pages_delay",
        "list_endless",
        "catalog_endless",
        "max_list_pages",
    ]
    arg: str = ""


# --- actions ---


@dataclass(frozen=True, slots=True)
class ServerSets:
    """The server changes a resource; with ``notify`` it publishes ``resources/updated``
    (with the new contents to listens that asked for pushed bodies). ``push`` sends
    the body whether asked or not: ``every_stream`` (on every open stream, with its
    id), ``unknown_subscription`` (with an id nobody opened), ``before_ack`` (on the
    next stream, before its acknowledgment)."""

    uri: str
    version: str
    notify: bool
    push: Literal["", "every_stream", "unknown_subscription", "before_ack"] = ""


@dataclass(frozen=True, slots=True)
class Notify:
    """A notification arrives on the stream: ``updated`` (for ``uri``, whatever the
    filter said), ``list_changed``, ``updated_before_ack`` (on the next stream,
    before its acknowledgment), ``foreign`` (with a subscription id nobody asked
    for), ``garbage`` (a malformed frame), ``updated_unread`` (for ``count`` distinct
    URIs the cache never read, `unread_uri`)."""

    kind: Literal[
        "updated",
        "list_changed",
        "updated_before_ack",
        "foreign",
        "garbage",
        "updated_unread",
        "catalog_changed",
    ]
    uri: str = ""
    count: int = 1


@dataclass(frozen=True, slots=True)
class NextRead:
    """Server reads of ``uri`` fail this way instead of answering: the next one only,
    or (``sticky``) every one until ``reads of X recover``; ``fault`` ``None`` recovers.

    The answer-shape faults (`ANSWER_HINTS`, `SCHEMA_FAULTS`, ``input_rounds``,
    ``version_refused``) answer, but oddly: a change hint on the read's own answer, a
    result that breaks the schema, a ``requestState`` round first, a ``-32022`` first.
    """

    uri: str
    fault: Fault | None
    sticky: bool = False


ANSWER_HINTS = ("hint", "hint_no_id", "hint_unknown_id", "hint_body")
"""Faults that put a ``resources/updated`` for the URI on the read's own answer (with
the live stream's subscription id, none, or one nobody asked for; ``hint_body``: with
the live stream's id and a pushed body)."""
SCHEMA_FAULTS = ("no_contents", "ttl_string", "ttl_bool")
"""Faults whose read result breaks the schema (no ``contents``; ``ttlMs`` as a string
or a boolean): only a wire has JSON to break."""


def odd_answer(step: object) -> str | None:
    """The answer-shape fault ``step`` switches on (a hint on a read's or a list's own
    answer, a broken schema, a ``requestState`` round, a ``-32022``), else ``None``.
    Worlds whose server cannot shape answers name these in ``unplayable``."""
    match step:
        case NextRead(fault=fault) if fault in (
            *ANSWER_HINTS,
            *SCHEMA_FAULTS,
            "input_rounds",
            "version_refused",
        ):
            return fault
        case ServerChange(what="list_hint"):
            return "list_hint"
        case ServerChange(what="listen_version_refused"):
            return "listen_version_refused"
        case _:
            return None


@dataclass(frozen=True, slots=True)
class ServerChange:
    """A change of the server as a whole or of one resource's presence."""

    what: Literal[
        "down",
        "up",
        "drop_stream",
        "close_stream",
        "hold_reads",
        "release_reads",
        "remove",
        "hide",
        "deny",
        "deny_remediable",
        "deny_final",
        "allow",
        "invalidate_cursors",
        "list_hint",
        "fall_silent",
        "hold_acks",
        "release_acks",
        "expire_session",
        "listen_version_refused",
        "hold_unsubscribes",
        "release_unsubscribes",
        "share_publicly",
        "catalog_set",
        "catalog_set_notify",
        "catalog_fault",
        "tool_refused_once",
        "tool_error_once",
        "tool_schema_changed",
        "tool_fault",
    ]
    uri: str = ""
    """The resource; for the ``catalog_*`` changes the catalog (`CATALOG_WORDS`); for
    the ``tool_*`` changes the tool's name."""
    principal: str | None = None
    version: str = ""
    """``catalog_set*``: the catalog's new version; ``catalog_fault``: the fault
    every list of it meets (``""``: none); ``tool_fault``: what the next call of the
    tool meets (`freshcache.testing._reference.TOOL_FAULTS`)."""


CATALOG_WORDS = {"tools": "tools", "prompts": "prompts", "templates": "resource_templates"}
"""How a row names a catalog."""


def catalog_items(kind: str, version: str) -> list[dict[str, object]]:
    """The items of catalog ``kind`` at ``version`` on the reference server: the first
    item's name carries the version (``search-v2``), so a check can tell v1 from v2."""
    match kind:
        case "tools":
            return [
                {
                    "name": f"search-{version}",
                    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
                {"name": "help", "inputSchema": {"type": "object"}},
            ]
        case "prompts":
            return [{"name": f"summarize-{version}"}, {"name": "explain"}]
        case _:
            return [
                {"name": f"guide-{version}", "uriTemplate": "guide://{section}/{name}"},
                {"name": "note", "uriTemplate": "note://{id}"},
            ]


def catalog_version_of(names: tuple[str, ...]) -> str | None:
    """The version label of a reference catalog (``v2``) from its items' names."""
    first = names[0] if names else ""
    label = first.rsplit("-", 1)[-1]
    return label if first != label else None


@dataclass(frozen=True, slots=True)
class FleetChange:
    """Something happens to a fleet of workers (rows that start ``given a fleet of N
    workers``): ``listener_dies`` (the lease holder vanishes without a word),
    ``store_down`` / ``store_up`` (every worker's store connection is cut / allowed
    again), ``store_restarts`` (cut, the fleet's keys gone, allowed again: what a
    restart without persistence leaves), ``store_saves`` / ``store_restores`` (a
    snapshot of the fleet's keys; a restart that brings them back, as from an RDB or
    AOF, with the script cache empty), ``messages_lost`` (the channel skips sequence
    numbers, as when the store drops a slow subscriber's messages)."""

    what: Literal[
        "listener_dies",
        "store_down",
        "store_up",
        "store_restarts",
        "store_saves",
        "store_restores",
        "messages_lost",
        "entry_copied",
    ]
    uri: str = ""
    principal: str | None = None
    to: str | None = None
    """``entry_copied``: a process that can write the store copies ``principal``'s entry
    of ``uri`` under ``to``'s key (issue 22: entries are bound to their principal)."""


def fleet_size(steps: tuple[object, ...]) -> int | None:
    """How many workers a row's fleet has, or ``None`` when it is not a fleet row."""
    for step in steps:
        if isinstance(step, Given) and step.what == "fleet":
            return int(step.arg)
    return None


@dataclass(frozen=True, slots=True)
class TimePasses:
    """The (virtual) clock moves on."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Observe:
    """The client looks: ``read`` (may do I/O), ``status`` (no I/O), ``list``,
    ``background`` (a read that is left running; observed with ``await background``)."""

    how: Literal[
        "read",
        "status",
        "list",
        "background",
        "await_background",
        "context",
        "catalog",
        "catalog_status",
        "mutate_catalog",
        "call_tool",
    ]
    uri: str = ""
    principal: str | None = None
    timeout: float | None = None
    """A ``read`` with its own deadline (seconds) instead of the cache's default."""
    worker: int | None = None
    """In a fleet row: which worker looks (1 is the first listener); else the cache."""
    also: tuple[str, ...] = ()
    """``context``: the other URIs of the `FreshCache.context` call, left running like a
    background read; ``await background`` observes ``uri``'s part of the Context."""
    says_seen: bool = True
    """``call_tool``: pass the tools catalog the row was last handed as ``seen=`` (``False``:
    the caller does not say what it built the arguments from)."""


@dataclass(frozen=True, slots=True)
class Select:
    """The agent changes its selection at run time."""

    uris: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReadUnselected:
    """The agent reads ``count`` distinct URIs it never selected (`bulk_uri`), each of
    which the server serves at ``v1``: bookkeeping must stay bounded (invariant 10)."""

    count: int


def bulk_uri(n: int) -> str:
    """The ``n``-th URI of a `ReadUnselected` step."""
    return f"guide://bulk/{n}"


def unread_uri(n: int) -> str:
    """The ``n``-th URI of a ``notify updated N never-read uris`` step."""
    return f"guide://unread/{n}"


Step = (
    ServerSets
    | Notify
    | NextRead
    | ServerChange
    | TimePasses
    | Observe
    | Select
    | ReadUnselected
    | FleetChange
)
Setup = Given

_URI = r"(\S+)"
_PATTERNS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Step | Given]]] = []


def _rule(
    pattern: str,
) -> Callable[[Callable[[re.Match[str]], Step | Given]], Callable[[re.Match[str]], Step | Given]]:
    def register(
        build: Callable[[re.Match[str]], Step | Given],
    ) -> Callable[[re.Match[str]], Step | Given]:
        _PATTERNS.append((re.compile(pattern + r"$", re.IGNORECASE), build))
        return build

    return register


# given ...
_rule(r"given no listen")(lambda m: Given("no_listen"))
_rule(r"given no list changes")(lambda m: Given("no_list_changed"))
_rule(rf"given ack omits {_URI}")(lambda m: Given("ack_omits", resolve(m[1])))
_rule(r"given not cached")(lambda m: Given("not_cached"))
_rule(r"given ttl (\d+) ?ms")(lambda m: Given("ttl", m[1]))
_rule(r"given policy subscription-backed")(lambda m: Given("subscription_backed"))
_rule(r"given policy ttl for uncovered")(lambda m: Given("ttl_for_uncovered"))
_rule(rf"given stale allowed for {_URI}")(lambda m: Given("stale_allowed", resolve(m[1])))
_rule(r"given public shared")(lambda m: Given("public_shared"))
_rule(r"given scope public")(lambda m: Given("scope_public"))
_rule(rf"given also selected {_URI}")(lambda m: Given("also_selected", resolve(m[1])))
_rule(r"given principal (\w+)")(lambda m: Given("principal", m[1]))
_rule(r"given page size (\d+)")(lambda m: Given("page_size", m[1]))
_rule(r"given store holds (\d+) entr(?:y|ies)")(lambda m: Given("store_entries", m[1]))
_rule(r"given later list pages ttl (\d+) ?ms")(lambda m: Given("later_pages_ttl", m[1]))
_rule(r"given pushed bodies")(lambda m: Given("pushed_bodies"))
_rule(r"given nothing selected")(lambda m: Given("nothing_selected"))
_rule(r"given later list pages take (\d+) ?ms")(lambda m: Given("later_pages_delay", m[1]))
_rule(r"given list cursors never end")(lambda m: Given("list_endless"))
_rule(r"given list walks stop after (\d+) pages")(lambda m: Given("max_list_pages", m[1]))

# catalogs: tools, prompts, resource templates (invariants 13, 14)
_CATALOG = r"(tools|prompts|templates)"
_rule(rf"given {_CATALOG} page size (\d+)")(lambda m: Given("catalog_page_size", m[2]))
_rule(rf"given later {_CATALOG} pages ttl (\d+) ?ms")(lambda m: Given("catalog_later_ttl", m[2]))
_rule(rf"given later {_CATALOG} pages private")(lambda m: Given("catalog_later_private"))
_rule(rf"given {_CATALOG} public")(lambda m: Given("catalog_public"))
_rule(r"given stale catalogs allowed")(lambda m: Given("stale_catalogs"))
_rule(rf"given {_CATALOG} ttl (\d+) ?ms")(lambda m: Given("catalog_ttl", m[2]))
_rule(rf"given {_CATALOG} cursors never end")(lambda m: Given("catalog_endless"))
_rule(rf"server changes {_CATALOG} to (v\d+)( and notifies)?")(
    lambda m: ServerChange(
        "catalog_set_notify" if m[3] else "catalog_set", CATALOG_WORDS[m[1]], version=m[2]
    )
)
_rule(rf"notify {_CATALOG} changed")(lambda m: Notify("catalog_changed", CATALOG_WORDS[m[1]]))
_rule(rf"{_CATALOG} lists (are denied|fail|time out|recover)")(
    lambda m: ServerChange(
        "catalog_fault",
        CATALOG_WORDS[m[1]],
        version={"are denied": "denied", "fail": "server_error", "time out": "timeout"}.get(
            m[2], ""
        ),
    )
)
_rule(rf"{_CATALOG}(?: as (\w+))?")(lambda m: Observe("catalog", CATALOG_WORDS[m[1]], m[2]))
_rule(rf"status {_CATALOG}")(lambda m: Observe("catalog_status", CATALOG_WORDS[m[1]]))
_rule(rf"mutate {_CATALOG}")(lambda m: Observe("mutate_catalog", CATALOG_WORDS[m[1]]))

# tool calls (`FreshCache.call_tool`): a tool is named as the reference catalog names it
_TOOL = r"([\w-]+)"
_rule(rf"call tool {_TOOL}")(lambda m: Observe("call_tool", m[1]))
_rule(rf"call tool {_TOOL} not saying what it saw")(
    lambda m: Observe("call_tool", m[1], says_seen=False)
)
_rule(rf"next call of {_TOOL} is refused as unknown")(
    lambda m: ServerChange("tool_refused_once", m[1])
)
_rule(rf"next call of {_TOOL} answers a tool error")(
    lambda m: ServerChange("tool_error_once", m[1])
)
_rule(rf"the answer to the next call of {_TOOL} is lost after it ran")(
    lambda m: ServerChange("tool_fault", m[1], version="lost")
)
_rule(rf"next call of {_TOOL} fails with customer record not found")(
    lambda m: ServerChange("tool_fault", m[1], version="fails")
)
_rule(rf"next call of {_TOOL} is refused as unknown the TypeScript SDK way")(
    lambda m: ServerChange("tool_fault", m[1], version="ts_unknown")
)
_rule(rf"next call of {_TOOL} asks for input")(
    lambda m: ServerChange("tool_fault", m[1], version="asks")
)
_rule(rf"server changes the input schema of {_TOOL}")(
    lambda m: ServerChange("tool_schema_changed", m[1])
)

# server content
_rule(rf"server sets {_URI} (v\d+)( and notifies)?")(
    lambda m: ServerSets(resolve(m[1]), m[2], bool(m[3]))
)
_rule(rf"server sets {_URI} (v\d+) and pushes its body (to every stream|before ack)")(
    lambda m: ServerSets(
        resolve(m[1]), m[2], False, "before_ack" if m[3] == "before ack" else "every_stream"
    )
)
_rule(rf"server sets {_URI} (v\d+) and pushes its body with unknown subscription")(
    lambda m: ServerSets(resolve(m[1]), m[2], False, "unknown_subscription")
)
_rule(rf"server removes {_URI}")(lambda m: ServerChange("remove", resolve(m[1])))
_rule(rf"server unlists {_URI}")(lambda m: ServerChange("hide", resolve(m[1])))
_rule(rf"server denies {_URI}(?: to (\w+))?")(lambda m: ServerChange("deny", resolve(m[1]), m[2]))
_rule(rf"server denies {_URI} with remediation")(
    lambda m: ServerChange("deny_remediable", resolve(m[1]))
)
_rule(rf"server denies {_URI} without remediation")(
    lambda m: ServerChange("deny_final", resolve(m[1]))
)
_rule(rf"server allows {_URI}(?: to (\w+))?")(lambda m: ServerChange("allow", resolve(m[1]), m[2]))
_rule(r"server invalidates cursors")(lambda m: ServerChange("invalidate_cursors"))
_rule(rf"server shares {_URI} publicly")(lambda m: ServerChange("share_publicly", resolve(m[1])))
# 2025-11-25: unsubscribes the server finishes after a later subscribe (issue 22)
_rule(r"hold unsubscribes")(lambda m: ServerChange("hold_unsubscribes"))
_rule(r"release unsubscribes")(lambda m: ServerChange("release_unsubscribes"))

# notifications
_rule(rf"notify updated {_URI}(?: x(\d+))?")(
    lambda m: Notify("updated", resolve(m[1]), int(m[2] or 1))
)
_rule(r"notify list changed")(lambda m: Notify("list_changed"))
_rule(rf"notify updated {_URI} before ack")(lambda m: Notify("updated_before_ack", resolve(m[1])))
_rule(rf"notify updated {_URI} with unknown subscription")(
    lambda m: Notify("foreign", resolve(m[1]))
)
_rule(r"send malformed frame")(lambda m: Notify("garbage"))

# read faults
_rule(rf"next read of {_URI} times out")(lambda m: NextRead(resolve(m[1]), "timeout"))
_rule(rf"next read of {_URI} is denied")(lambda m: NextRead(resolve(m[1]), "denied"))
_rule(rf"next read of {_URI} is not found")(lambda m: NextRead(resolve(m[1]), "not_found"))
_rule(rf"next read of {_URI} fails")(lambda m: NextRead(resolve(m[1]), "server_error"))
_rule(rf"next read of {_URI} returns local copy")(lambda m: NextRead(resolve(m[1]), "local_copy"))
_rule(rf"reads of {_URI} time out")(lambda m: NextRead(resolve(m[1]), "timeout", sticky=True))
_rule(rf"reads of {_URI} fail")(lambda m: NextRead(resolve(m[1]), "server_error", sticky=True))
_rule(rf"reads of {_URI} return local copy")(
    lambda m: NextRead(resolve(m[1]), "local_copy", sticky=True)
)
_rule(rf"reads of {_URI} recover")(lambda m: NextRead(resolve(m[1]), None, sticky=True))

# server and stream life
_rule(r"server goes down")(lambda m: ServerChange("down"))
_rule(r"server comes back")(lambda m: ServerChange("up"))
_rule(r"stream drops")(lambda m: ServerChange("drop_stream"))
_rule(r"stream closes")(lambda m: ServerChange("close_stream"))
# Revision 2025-11-25's session ends (HTTP 404 on it); on 2026-07-28 the same server
# behaviour is a graceful end of the stream (DESIGN §6).
_rule(r"session expires")(lambda m: ServerChange("expire_session"))
_rule(r"hold reads")(lambda m: ServerChange("hold_reads"))
_rule(r"release reads")(lambda m: ServerChange("release_reads"))

# answers with odd shapes (defects at the seams: hints anywhere, broken schema, parity)
_rule(rf"next read of {_URI} carries a hint")(lambda m: NextRead(resolve(m[1]), "hint"))
_rule(rf"next read of {_URI} carries a hint without subscription id")(
    lambda m: NextRead(resolve(m[1]), "hint_no_id")
)
_rule(rf"next read of {_URI} carries a hint with unknown subscription")(
    lambda m: NextRead(resolve(m[1]), "hint_unknown_id")
)
_rule(rf"next read of {_URI} carries a pushed body")(lambda m: NextRead(resolve(m[1]), "hint_body"))
_rule(rf"next read of {_URI} has no contents")(lambda m: NextRead(resolve(m[1]), "no_contents"))
_rule(rf"next read of {_URI} has ttl as string")(lambda m: NextRead(resolve(m[1]), "ttl_string"))
_rule(rf"next read of {_URI} has ttl as bool")(lambda m: NextRead(resolve(m[1]), "ttl_bool"))
_rule(rf"next read of {_URI} needs another round")(
    lambda m: NextRead(resolve(m[1]), "input_rounds")
)
_rule(rf"reads of {_URI} need another round")(
    lambda m: NextRead(resolve(m[1]), "input_rounds", sticky=True)
)
_rule(rf"next read of {_URI} is refused for its protocol version")(
    lambda m: NextRead(resolve(m[1]), "version_refused")
)
_rule(r"next list carries a hint")(lambda m: ServerChange("list_hint"))
_rule(r"next listen is refused for its protocol version")(
    lambda m: ServerChange("listen_version_refused")
)
_rule(r"stream falls silent after keep-alives")(lambda m: ServerChange("fall_silent"))

# time and the client
_rule(r"time passes (\d+(?:\.\d+)?) ?s")(lambda m: TimePasses(float(m[1])))
_rule(rf"read {_URI}(?: as (\w+))?")(lambda m: Observe("read", resolve(m[1]), m[2]))
_rule(rf"status {_URI}(?: as (\w+))?")(lambda m: Observe("status", resolve(m[1]), m[2]))
_rule(rf"read {_URI} in background")(lambda m: Observe("background", resolve(m[1])))
_rule(r"await background")(lambda m: Observe("await_background"))
_rule(rf"context {_URI} and {_URI} in background")(
    lambda m: Observe("context", resolve(m[1]), also=(resolve(m[2]),))
)
_rule(r"list")(lambda m: Observe("list"))
_rule(r"select (.+)")(lambda m: Select(tuple(resolve(w) for w in m[1].replace(",", " ").split())))
# acknowledgments and bookkeeping (invariants 4, 10)
_rule(r"given acks held")(lambda m: Given("acks_held"))
_rule(r"hold acks")(lambda m: ServerChange("hold_acks"))
_rule(r"release acks")(lambda m: ServerChange("release_acks"))
_rule(rf"read {_URI} within (\d+(?:\.\d+)?) ?s")(
    lambda m: Observe("read", resolve(m[1]), timeout=float(m[2]))
)
_rule(r"read (\d+) distinct unselected uris")(lambda m: ReadUnselected(int(m[1])))
_rule(r"notify updated (\d+) never-read uris")(lambda m: Notify("updated_unread", count=int(m[1])))

# a fleet of workers on one Valkey/Redis (DESIGN §7)
_rule(r"given a fleet of (\d+) workers")(lambda m: Given("fleet", m[1]))
_rule(rf"read {_URI} on worker (\d+)")(lambda m: Observe("read", resolve(m[1]), worker=int(m[2])))
_rule(rf"read {_URI} as (\w+) on worker (\d+)")(
    lambda m: Observe("read", resolve(m[1]), m[2], worker=int(m[3]))
)
_rule(rf"status {_URI} on worker (\d+)")(
    lambda m: Observe("status", resolve(m[1]), worker=int(m[2]))
)
_rule(rf"read {_URI} in background on worker (\d+)")(
    lambda m: Observe("background", resolve(m[1]), worker=int(m[2]))
)
_rule(r"the listener dies")(lambda m: FleetChange("listener_dies"))
_rule(r"the fleet store goes down")(lambda m: FleetChange("store_down"))
_rule(r"the fleet store comes back")(lambda m: FleetChange("store_up"))
_rule(r"the fleet store restarts empty")(lambda m: FleetChange("store_restarts"))
_rule(r"the fleet store saves")(lambda m: FleetChange("store_saves"))
_rule(r"the fleet store restarts from its save")(lambda m: FleetChange("store_restores"))
_rule(r"fleet messages are lost")(lambda m: FleetChange("messages_lost"))
_rule(rf"a store writer copies {_URI}'s entry from (\w+) to (\w+)")(
    lambda m: FleetChange("entry_copied", resolve(m[1]), m[2], m[3])
)


def parse_step(text: str) -> Step | Given:
    """Parse one phrase; raises ``ValueError`` naming the phrase when nothing matches."""
    phrase = " ".join(text.split())
    # Longest pattern first, so "read X in background" is not taken for "read X".
    for pattern, build in sorted(_PATTERNS, key=lambda p: -len(p[0].pattern)):
        match = pattern.match(phrase)
        if match:
            return build(match)
    raise ValueError(f"unknown step {phrase!r}")


# --- expectations ---

ExpectState = Literal["fresh", "awaiting_fresh_source", "denied", "not_found", "stale"]

CALL_STATES = (
    "answered",
    "may_have_run",
    "input_required",
    "tool_changed",
    "unknown_tool",
    "denied",
    "not_found",
    "unavailable",
    "awaiting_fresh_source",
    "stale",
)
"""What a ``call tool`` step can come to (`freshcache.ToolCall.state`; spelled out here
because the stdio reference server imports this module and none of the client)."""


@dataclass(frozen=True, slots=True)
class Expect:
    """One check on the last observation or on the run as a whole."""

    what: Literal[
        "state",
        "server_read",
        "no_server_read",
        "server_reads",
        "server_reads_at_most",
        "listed",
        "not_listed",
        "stream",
        "untrusted",
        "tracked_uris_at_most",
        "fleet",
        "remediation",
        "call",
        "retried",
        "not_retried",
        "relisted",
        "not_relisted",
        "tool_error",
        "tool_calls",
    ]
    state: ExpectState | None = None
    version: str | None = None
    reason: str | None = None
    uri: str = ""
    number: int = 0
    word: str = ""


_EXPECT_STATE = re.compile(
    r"(fresh|awaiting_fresh_source|denied|not_found|stale)"
    r"(?: (v\d+))?"
    r"(?: \((\w+)\))?$"
)


def parse_expect(text: str) -> Expect:
    """Parse one expectation; raises ``ValueError`` naming it when nothing matches."""
    phrase = " ".join(text.split())
    if m := _EXPECT_STATE.match(phrase):
        state = m[1]
        if state in ("fresh", "stale") and m[2] is None:
            raise ValueError(f"{phrase!r}: say which version, e.g. '{state} v1'")
        if state not in ("fresh", "stale") and m[2] is not None:
            raise ValueError(f"{phrase!r}: only fresh and stale results carry a version")
        return Expect("state", state=state, version=m[2], reason=m[3])  # type: ignore[arg-type]
    if phrase == "server read":
        return Expect("server_read")
    if phrase == "no server read":
        return Expect("no_server_read")
    if m := re.match(r"server reads (\d+)$", phrase):
        return Expect("server_reads", number=int(m[1]))
    if m := re.match(r"server reads at most (\d+)$", phrase):
        return Expect("server_reads_at_most", number=int(m[1]))
    if m := re.match(rf"listed {_URI}$", phrase):
        return Expect("listed", uri=resolve(m[1]))
    if m := re.match(rf"not listed {_URI}$", phrase):
        return Expect("not_listed", uri=resolve(m[1]))
    if m := re.match(r"stream (live|lost|closed|unsupported|opening)$", phrase):
        return Expect("stream", word=m[1])
    if m := re.match(r"remediation (available|unavailable|none)$", phrase):
        return Expect("remediation", word=m[1])
    if m := re.match(r"untrusted messages (\d+)$", phrase):
        return Expect("untrusted", number=int(m[1]))
    if m := re.match(r"tracked uris at most (\d+)$", phrase):
        return Expect("tracked_uris_at_most", number=int(m[1]))
    if m := re.match(r"call (\w+)(?: \((\w+)\))?$", phrase):
        if m[1] not in CALL_STATES:
            raise ValueError(f"{phrase!r}: a call is one of {', '.join(CALL_STATES)}")
        return Expect("call", word=m[1], reason=m[2])
    if phrase in ("retried", "not retried", "relisted", "not relisted", "tool error"):
        return Expect(phrase.replace(" ", "_"))  # type: ignore[arg-type]
    if m := re.match(r"tool calls (\d+)$", phrase):
        return Expect("tool_calls", number=int(m[1]))
    if m := re.match(r"(fenced-off writes|sequence gaps) (\d+)$", phrase):
        counter = "fenced_writes" if m[1] == "fenced-off writes" else "gaps"
        return Expect("fleet", word=counter, number=int(m[2]))
    raise ValueError(f"unknown expectation {phrase!r}")
