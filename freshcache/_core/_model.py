"""What a read returns: result states, reasons and resource contents (DESIGN §1).

A `ReadResult` is immutable and built once per server read; a fresh cache hit hands
out the very object that was built when the read landed, so the hit path allocates
nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeVar, get_args

from ._frozen import canonical_json, frozen_mapping, thawed
from ._slots import filled_by_slots

State = Literal["fresh", "awaiting_fresh_source", "denied", "not_found", "stale"]
"""Closed set of result states; only ``fresh`` and ``stale`` carry text."""

FRESH: State = "fresh"
AWAITING_FRESH_SOURCE: State = "awaiting_fresh_source"
DENIED: State = "denied"
NOT_FOUND: State = "not_found"
STALE: State = "stale"

Reason = Literal[
    # The reasons of DESIGN §1:
    "invalidated",  # a change was heard of; a re-read is needed or under way
    "timeout",  # the server read did not answer within the deadline
    "unreachable",  # the server could not be reached
    "stream_lost",  # the subscription that covered the URI broke
    "local_copy_only",  # the loader answered from a local copy, not the server
    "server_error",  # the server answered with an internal error
    # Finer-grained reasons for situations DESIGN §1 leaves open:
    "expired",  # the server's ttlMs window passed
    "not_cached",  # nothing has been read yet
    "uncovered",  # no live subscription covers the URI: it is read before each use
    "denied",  # reason carried by `denied` results
    "not_found",  # reason carried by `not_found` results
]
"""Why a result is not plain ``fresh``."""

STATES: tuple[State, ...] = get_args(State)
REASONS: tuple[Reason, ...] = get_args(Reason)

REPROOF_CAUSES = frozenset({"acknowledged", "stream_lost"})
"""Invalidation causes that are no change heard of: a new stream re-proving what was
read before it (invariant 4), a lost stream. Nothing is known to have changed; the
re-read decides (`StateChange.reproof`)."""


_S = TypeVar("_S", bound=str)


def moved(
    before: tuple[_S, str | None, bool] | None, state: _S, version: str | None, cause: str | None
) -> tuple[_S, str | None, bool] | None:
    """The mark to remember when a move is worth reporting to `changes()`, else ``None``:
    its (state, version) moved, or a change is heard of while it is not fresh again yet
    for a re-proof (``cause`` in `REPROOF_CAUSES` was no change; this is). A burst of
    changes heard is one report. The marks: (state, version, a change heard)."""
    heard = cause is not None and cause not in REPROOF_CAUSES
    if before is not None and before[:2] == (state, version) and (before[2] or not heard):
        return None
    return (state, version, heard)


CacheScope = Literal["public", "private"]


@filled_by_slots
@dataclass(frozen=True, slots=True)
class ResourceContents:
    """One item of a ``resources/read`` result, in MCP's shape (text or blob)."""

    uri: str
    text: str | None = None
    """Text contents (``TextResourceContents``); ``None`` for a blob."""
    blob: str | None = None
    """Base64 contents (``BlobResourceContents``); ``None`` for text."""
    mime_type: str | None = None
    annotations: Mapping[str, Any] | None = None
    """Read-only (a deeply frozen copy of what was given): results are shared."""
    meta: Mapping[str, Any] | None = None
    """Read-only, like `annotations`."""

    def __post_init__(self) -> None:
        # Invariant 13: a result is handed to every caller of the same hit, so what a
        # caller can reach must be immutable. Built once per server read.
        if self.annotations is not None:
            object.__setattr__(self, "annotations", frozen_mapping(self.annotations))
        if self.meta is not None:
            object.__setattr__(self, "meta", frozen_mapping(self.meta))

    @classmethod
    def from_mcp(cls, item: Mapping[str, Any]) -> ResourceContents:
        """Build from a wire dict (``uri``, ``text``/``blob``, ``mimeType`` ...)."""
        return cls(
            uri=str(item["uri"]),
            text=item.get("text"),
            blob=item.get("blob"),
            mime_type=item.get("mimeType"),
            annotations=item.get("annotations"),
            meta=item.get("_meta"),
        )

    def to_mcp(self) -> dict[str, Any]:
        """The wire dict for this item."""
        out: dict[str, Any] = {"uri": self.uri}
        if self.mime_type is not None:
            out["mimeType"] = self.mime_type
        if self.text is not None:
            out["text"] = self.text
        if self.blob is not None:
            out["blob"] = self.blob
        if self.annotations is not None:
            out["annotations"] = thawed(self.annotations)
        if self.meta is not None:
            out["_meta"] = thawed(self.meta)
        return out


def version_of(contents: Sequence[ResourceContents]) -> str:
    """A short digest of the contents, so that "v1" and "v2" are observable.

    Every field of every item goes in, each length-prefixed (so no two different
    contents share an encoding); annotations and ``_meta`` go in as canonical JSON,
    when present. One hash per reply, and no JSON document built for the text.
    """
    digest = hashlib.blake2b(digest_size=8)
    for item in contents:
        digest.update(_canonical(item))
    return digest.hexdigest()


def _canonical(item: ResourceContents) -> bytes:
    parts = []
    for field_ in (item.uri, item.mime_type, item.text, item.blob):
        parts.append("-" if field_ is None else f"{len(field_)}:{field_}")
    if item.annotations is not None or item.meta is not None:
        parts.append(canonical_json([item.annotations, item.meta]))
    return "".join(parts).encode("utf-8", "surrogatepass")


def text_of(contents: Sequence[ResourceContents]) -> str | None:
    """The text handed to a model: the text items joined by newlines, else ``None``."""
    texts = [item.text for item in contents if item.text is not None]
    if not texts:
        return None
    return texts[0] if len(texts) == 1 else "\n".join(texts)


@dataclass(frozen=True, slots=True)
class Remediation:
    """What a structured denial says can be done about it (the authorization denial
    envelope of SEP-2643, ``error.data.authorization``).

    ``available`` is false when the envelope offers no remediation hint (nothing the
    caller can do: denied, do not retry); true when it carries at least one, handed
    on unchanged in ``hints`` (each has a ``type``: ``url``,
    ``oauth_authorization_details`` ...; unknown types are kept for the caller).
    """

    available: bool
    hints: tuple[Mapping[str, Any], ...] = ()
    """The ``remediationHints`` objects, read-only."""
    context_id: str | None = None
    """``authorizationContextId``: echo it in ``_meta`` under
    ``io.modelcontextprotocol/authorization-context-id`` when retrying."""
    reason: str | None = None
    """The envelope's ``reason`` (``insufficient_authorization``)."""
    credential_disposition: str | None = None
    """``replacement`` (the default) or ``additional``."""


@filled_by_slots
@dataclass(frozen=True, slots=True)
class ReadResult:
    """The answer to one read or status call.

    Only ``fresh`` and ``stale`` results carry ``contents``/``text``/``version``;
    every other state carries none, so stale text cannot leak by accident.

    A result the engine builds from a server reply computes its ``version`` on first
    use (`fresh_result`): most cached results are never asked for it, and the digest
    is a third of what storing a reply costs.
    """

    state: State
    uri: str
    reason: Reason | None = None
    """Why the result is not plain ``fresh``; ``None`` for a fresh result."""
    contents: tuple[ResourceContents, ...] = ()
    text: str | None = None
    version: str | None = None
    """Digest of ``contents`` (see `version_of`)."""
    fetched_at: float | None = None
    """Wall-clock time (seconds since the epoch) the contents were received."""
    server_read: bool = False
    """Whether a server read happened for this call."""
    age: float | None = None
    """Seconds since the contents were received; set on ``stale`` results."""
    detail: str | None = field(default=None, compare=False)
    """Human-readable detail of a failure (server message, exception text)."""
    remediation: Remediation | None = field(default=None, compare=False)
    """On a ``denied`` result whose server sent a structured denial envelope: what
    can be done about it (`Remediation`); ``None`` when the server said nothing."""

    @property
    def ok(self) -> bool:
        """True when the result may be handed to a model as current (``fresh``)."""
        return self.state == FRESH


def _slot(cls: type, name: str) -> Any:
    """The member descriptor of a slotted class's field (its ``__get__``/``__set__``)."""
    return cls.__dict__[name]


_new_result = object.__new__
_set_state = _slot(ReadResult, "state").__set__
_set_uri = _slot(ReadResult, "uri").__set__
_set_reason = _slot(ReadResult, "reason").__set__
_set_contents = _slot(ReadResult, "contents").__set__
_set_text = _slot(ReadResult, "text").__set__
_set_version = _slot(ReadResult, "version").__set__
_set_fetched_at = _slot(ReadResult, "fetched_at").__set__
_set_server_read = _slot(ReadResult, "server_read").__set__
_set_age = _slot(ReadResult, "age").__set__
_set_detail = _slot(ReadResult, "detail").__set__
_set_remediation = _slot(ReadResult, "remediation").__set__


_get_version = _slot(ReadResult, "version").__get__
_UNKNOWN = object()


class _VersionOnFirstUse:
    """``ReadResult.version``: the slot's value, or the digest of the contents made
    (and kept in the slot) on first use when the result was built without one.

    A descriptor on the one field rather than a ``__getattr__`` on the class: that
    would send every attribute read of every result (``hit.__class__`` on the hit
    path too) through a slower, unspecialised lookup.
    """

    def __get__(self, result: ReadResult | None, owner: type | None = None) -> Any:
        if result is None:
            return self
        try:
            return _get_version(result)
        except AttributeError:  # left to first use (`fresh_result`)
            version = version_of(result.contents)
            _set_version(result, version)  # the same digest, whichever thread is first
            return version

    def __set__(self, result: ReadResult, version: str | None) -> None:
        _set_version(result, version)  # (object.__setattr__: __init__, unpickling)


type.__setattr__(ReadResult, "version", _VersionOnFirstUse())


def _version_if_known(result: ReadResult) -> object:
    try:
        return _get_version(result)  # the slot alone: no digest made here
    except AttributeError:
        return _UNKNOWN


def fresh_result(
    uri: str,
    contents: tuple[ResourceContents, ...],
    *,
    fetched_at: float,
    server_read: bool,
    version: str | None = None,
    text: str | None = None,
) -> ReadResult:
    """Build a ``fresh`` result: ``text`` joined from ``contents`` unless given,
    ``version`` digested from them on first use unless given.

    Filled slot by slot: a frozen dataclass's own ``__init__`` pays an
    ``object.__setattr__`` per field, twice this on a path taken for every reply.
    """
    result: ReadResult = _new_result(ReadResult)
    _set_state(result, FRESH)
    _set_uri(result, uri)
    _set_reason(result, None)
    _set_contents(result, contents)
    _set_text(result, text if text is not None else text_of(contents))
    if version is not None:
        _set_version(result, version)
    _set_fetched_at(result, fetched_at)
    _set_server_read(result, server_read)
    _set_age(result, None)
    _set_detail(result, None)
    _set_remediation(result, None)
    return result


def fresh_results(
    uri: str, contents: tuple[ResourceContents, ...], fetched_at: float
) -> tuple[ReadResult, ReadResult]:
    """The two ``fresh`` results of one server reply, in one call: the one cached
    (``server_read`` false: what a hit hands out) and the one handed to the read's own
    callers (``server_read`` true). They share the joined text; each digests its version
    on first use. The same fields as `fresh_result` twice (the re-read path)."""
    text = contents[0].text if len(contents) == 1 else text_of(contents)
    cached: ReadResult = _new_result(ReadResult)
    handed: ReadResult = _new_result(ReadResult)
    for result in (cached, handed):
        _set_state(result, FRESH)
        _set_uri(result, uri)
        _set_reason(result, None)
        _set_contents(result, contents)
        _set_text(result, text)
        _set_fetched_at(result, fetched_at)
        _set_age(result, None)
        _set_detail(result, None)
        _set_remediation(result, None)
    _set_server_read(cached, False)
    _set_server_read(handed, True)
    return cached, handed


def served_copy(result: ReadResult, *, server_read: bool) -> ReadResult:
    """``result`` with another ``server_read`` (its version, once known, goes along)."""
    copy: ReadResult = _new_result(ReadResult)
    _set_state(copy, result.state)
    _set_uri(copy, result.uri)
    _set_reason(copy, result.reason)
    _set_contents(copy, result.contents)
    _set_text(copy, result.text)
    version = _version_if_known(result)
    if version is not _UNKNOWN:  # (else each copy digests on its own first use)
        _set_version(copy, version)
    _set_fetched_at(copy, result.fetched_at)
    _set_server_read(copy, server_read)
    _set_age(copy, result.age)
    _set_detail(copy, result.detail)
    _set_remediation(copy, result.remediation)
    return copy


_Copy = TypeVar("_Copy")


class _Problem(Protocol):
    @property
    def reason(self) -> Reason | None: ...
    @property
    def server_read(self) -> bool: ...
    @property
    def detail(self) -> str | None: ...


STALE_REASONS = frozenset({"timeout", "unreachable", "server_error"})
"""The failures after which an opted-in last copy may be handed out ``stale``."""


def labelled_stale(copy: _Copy, problem: _Problem, received_at: float, now: float) -> _Copy:
    """The opt-in last copy (resource text or a catalog), labelled ``stale`` with why
    the fresh read failed and its age: the one rule for both."""
    return replace(
        copy,  # type: ignore[type-var]
        state=STALE,
        reason=problem.reason,
        server_read=problem.server_read,
        age=max(0.0, now - received_at),
        detail=problem.detail,
    )


def problem_result(
    uri: str,
    state: State,
    reason: Reason,
    *,
    server_read: bool = False,
    detail: str | None = None,
    remediation: Remediation | None = None,
) -> ReadResult:
    """Build a result that carries no text."""
    return ReadResult(
        state=state,
        uri=uri,
        reason=reason,
        server_read=server_read,
        detail=detail,
        remediation=remediation,
    )
