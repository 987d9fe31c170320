"""The pydantic models that validate what comes off the wire (`freshcache._protocol._wire`).

Apart from `_wire` because pydantic takes a third of a second to import: it loads on
the first message parsed, not with ``from freshcache import FreshCache``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    jsonrpc: Literal["2.0"]
    id: str | int | None = None
    method: str | None = None
    params: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


_TtlMs = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""``ttlMs`` is a JSON number: ``"60000"`` or ``true`` is a broken answer, not a TTL."""


class _Contents(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    uri: str
    text: str | None = None
    blob: str | None = None
    mimeType: str | None = None
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")


class _ReadResult(BaseModel):
    # strict: a field of the wrong JSON type is a broken answer, never coerced (defect:
    # a read without ``contents`` used to be handed out fresh with empty text).
    model_config = ConfigDict(extra="allow", strict=True)
    resultType: str = "complete"
    contents: list[_Contents] | None = None
    """Required for a ``complete`` result; an ``input_required`` result has none."""
    ttlMs: _TtlMs | None = None
    cacheScope: Literal["public", "private"] | None = None
    requestState: str | None = None
    inputRequests: dict[str, Any] | None = None


class _Resource(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    uri: str
    name: str | None = None
    mimeType: str | None = None


class _ListResult(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    resultType: str = "complete"
    resources: list[_Resource]
    nextCursor: str | None = None
    ttlMs: _TtlMs | None = None
    cacheScope: Literal["public", "private"] | None = None


__all__ = ["ValidationError", "_Contents", "_ListResult", "_Message", "_ReadResult"]
