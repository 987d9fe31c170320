"""The version digest: equal contents give equal versions, any difference a new one."""

from __future__ import annotations

import pytest

from freshcache._core import ResourceContents, version_of

U = "guide://shipping/approval"

VARIANTS = {
    "text": (ResourceContents(U, text="ab"),),
    "other-text": (ResourceContents(U, text="abc"),),
    "blob": (ResourceContents(U, blob="ab"),),
    "mime": (ResourceContents(U, text="ab", mime_type="text/plain"),),
    "other-uri": (ResourceContents(U + "/x", text="ab"),),
    "split": (ResourceContents(U, text="a"), ResourceContents(U, text="b")),
    "field-shift": (ResourceContents(U, text="2:ab"),),
    "annotations": (ResourceContents(U, text="ab", annotations={"priority": 1}),),
    "meta": (ResourceContents(U, text="ab", meta={"priority": 1}),),
    "empty-text": (ResourceContents(U, text=""),),
    "no-items": (),
}


def test_every_difference_in_the_contents_gives_another_version():
    versions = {name: version_of(contents) for name, contents in VARIANTS.items()}
    assert len(set(versions.values())) == len(VARIANTS), versions


@pytest.mark.parametrize("name", sorted(VARIANTS), ids=sorted(VARIANTS))
def test_equal_contents_give_the_same_version(name):
    rebuilt = tuple(ResourceContents.from_mcp(item.to_mcp()) for item in VARIANTS[name])
    assert version_of(rebuilt) == version_of(VARIANTS[name])


def test_annotation_key_order_does_not_change_the_version():
    a = ResourceContents(U, text="x", annotations={"a": 1, "b": 2})
    b = ResourceContents(U, text="x", annotations={"b": 2, "a": 1})
    assert version_of((a,)) == version_of((b,))
