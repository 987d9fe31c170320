"""Deeply immutable copies of wire values (invariant 13: snapshots are immutable).

What freshcache hands out is shared by every caller that gets the same hit, so nothing
in it may be changed in place: mappings become read-only `MappingProxyType` views over
private copies, lists become tuples, all the way down. Built once when a reply lands,
never on the hit path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


def frozen(value: Any) -> Any:
    """A deeply immutable copy of a JSON-like value (dicts, lists, scalars)."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(frozen(v) for v in value)
    return value


def frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """`frozen` for an optional mapping (``None`` stays ``None``)."""
    if value is None or (isinstance(value, MappingProxyType) and _is_frozen(value)):
        return value
    result: Mapping[str, Any] = frozen(value)
    return result


def _is_frozen(value: Any) -> bool:
    if isinstance(value, MappingProxyType):
        return all(_is_frozen(v) for v in value.values())
    if isinstance(value, tuple):
        return all(_is_frozen(v) for v in value)
    return not isinstance(value, (dict, list, set, bytearray))


def thawed(value: Any) -> Any:
    """A plain, mutable copy (dicts and lists) of a `frozen` value, e.g. to send on."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Canonical JSON of a (frozen) value: the input of a version digest."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"not JSON: {value!r}")
