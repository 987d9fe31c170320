"""A caller that mutates everything it can reach of what the cache handed out
(invariant 13: mutating what a caller got never changes what the next caller gets)."""

from __future__ import annotations

import contextlib
from typing import Any

_REFUSALS = (TypeError, AttributeError, KeyError, IndexError, ValueError)


def mutate_everything(value: Any) -> int:
    """Try every ordinary mutation on ``value`` and on what it holds, recursively:
    set and delete attributes, items and keys, append, extend, clear. Returns how many
    attempts were *not* refused (0 for a deeply immutable value)."""
    accepted = 0
    seen: set[int] = set()

    def attempt(action: Any) -> None:
        nonlocal accepted
        with contextlib.suppress(*_REFUSALS):
            action()
            accepted += 1

    def walk(node: Any) -> None:
        if id(node) in seen or isinstance(node, (str, bytes, int, float, bool, type(None))):
            return
        seen.add(id(node))
        children: list[Any] = []
        if hasattr(node, "__slots__") or hasattr(node, "__dict__"):
            for name in _attributes(node):
                with contextlib.suppress(AttributeError):
                    children.append(getattr(node, name))
                attempt(lambda name=name: setattr(node, name, "injected"))
        if hasattr(node, "keys") and hasattr(node, "__getitem__"):
            for key in list(node.keys()):
                children.append(node[key])
                attempt(lambda key=key: node.__setitem__(key, "injected"))
            attempt(lambda: node.__setitem__("injected", "injected"))
            attempt(lambda: node.pop(next(iter(node))))
            attempt(lambda: node.clear())
        elif isinstance(node, (list, tuple, set, frozenset)):
            children.extend(node)
            held: Any = node
            attempt(lambda: held.append({"name": "injected"}))
            attempt(lambda: held.extend([{"name": "injected"}]))
            attempt(lambda: held.add("injected"))
            attempt(lambda: held.__setitem__(0, "injected"))
            attempt(lambda: held.clear())
        for child in children:
            walk(child)

    walk(value)
    return accepted


def _attributes(node: Any) -> list[str]:
    names: list[str] = []
    for cls in type(node).__mro__:
        slots = getattr(cls, "__slots__", ())
        names.extend([slots] if isinstance(slots, str) else list(slots))
    names.extend(getattr(node, "__dict__", {}))
    return [n for n in dict.fromkeys(names) if not n.startswith("__")]
