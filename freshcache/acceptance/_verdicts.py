"""Why a row failed: a broken promise, a cost, or something in between.

Every failed row is put in one class, from the failure lines the runner writes
(`freshcache.acceptance._runner.check`), so that a client that hands out old text and
one that only reads the server more often than it must do not look alike:

``old text``
    The promise broken: text handed out as current that is older than the row
    expects, or where the row says it is denied, gone or not to be trusted. Text
    *newer* than the row expects is never old text.
``unproven``
    The text handed out was current here, but the client skipped the server read the
    rules require (it trusted a copy read before the change was heard of, or one from
    before a reconnect): fewer server reads than the row needs. Had the server changed
    meanwhile it would have been old text.
``strictness``
    The client accepted a malformed answer (a ``ttlMs`` that is not a number, a read
    without contents) and handed out its text, or counted fewer untrusted messages
    than it was sent (a broken frame). Old text that is not what a malformed answer
    carried stays old text (`malformed_text`).
``no state``
    Nothing usable where a state was due: an error or nothing instead of text, a
    wrong state or reason without old text, a case that crashed or never finished, a
    driver that exited or hung.
``extra reads``
    A cost, not a promise: more server reads than the row needs, a server read where
    a cached answer was due, or newer text than expected (which took a read); more
    bookkeeping than allowed.

A row with several failures takes the most serious class, in the order above.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Literal

from ._format import Case
from ._steps import NextRead, Notify, Observe, ServerSets

Verdict = Literal["old text", "unproven", "strictness", "no state", "extra reads"]
CLASSES: tuple[Verdict, ...] = ("old text", "unproven", "strictness", "no state", "extra reads")
"""Most serious first."""

MALFORMED_READS = frozenset({"ttl_string", "ttl_bool", "no_contents"})
"""Read faults whose answer breaks the schema (steps ``... has ttl as string`` ...)."""


def malformed(case: Case) -> bool:
    """Whether ``case`` sends the client a malformed answer or frame."""
    return any(
        (isinstance(step, NextRead) and step.fault in MALFORMED_READS)
        or (isinstance(step, Notify) and step.kind == "garbage")
        for step in case.row.steps
    )


def malformed_text(case: Case) -> frozenset[str]:
    """The version labels of the texts ``case``'s malformed read answers may have
    carried for the URI its last observation is of: the server's version of that URI
    while such an answer was due (empty: nothing the row hands out can have come from a
    malformed answer; a broken frame carries no text)."""
    steps = case.row.steps
    last = next(
        (s for s in reversed(steps) if isinstance(s, Observe) and s.how in _TEXT_OBSERVATIONS),
        None,
    )
    if last is None:
        return frozenset()
    version, due, sticky = "v1", False, False
    carried: set[str] = set()
    for step in steps:
        match step:
            case ServerSets(uri=uri) if uri == last.uri:
                version = step.version
                if due:
                    carried.add(version)
            case NextRead(uri=uri) if uri == last.uri:
                due = step.fault in MALFORMED_READS
                sticky = due and step.sticky
                if due:
                    carried.add(version)
            case Observe(uri=uri, how="read") if uri == last.uri and step is not last:
                due = sticky  # a one-off fault answered this read
    return frozenset(carried)


_TEXT_OBSERVATIONS = frozenset({"read", "status"})


def observed_before(case: Case) -> bool:
    """Whether ``case`` observes a read (or a status) before its last observation: text
    handed out then was not proven by the last read going to the server."""
    return sum(isinstance(s, Observe) and s.how in _TEXT_OBSERVATIONS for s in case.row.steps) > 1


_VERSION = re.compile(r"^v(\d+)$")
_TEXT_VERSION = re.compile(r" @ v(\d+)'?$")


def _newer(got: str, wanted: str) -> bool | None:
    """Whether version label ``got`` is newer than ``wanted`` (``None``: not labels)."""
    a, b = _VERSION.match(got) or _TEXT_VERSION.search(got), _VERSION.match(wanted)
    if a is None or b is None:
        return None
    return int(a[1]) > int(b[1])


_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"cited (\S+) as current, expected stale"), "old"),
    (re.compile(r"cited (?P<got>\S+), expected \w+ (?P<wanted>v\d+)"), "version"),
    (re.compile(r"cited .* where the row expects"), "old"),
    (re.compile(r"withheld, expected"), "no state"),
    (re.compile(r"state is (?P<got>\w+), expected (?P<wanted>\w+)"), "state"),
    (re.compile(r"reason is \S+, expected"), "no state"),
    (re.compile(r"no text, expected"), "no state"),
    (re.compile(r"text is (?P<got>.+), expected version (?P<wanted>v\d+)"), "version"),
    (re.compile(r"server_read is True, expected False"), "extra reads"),
    (re.compile(r"server_read is False, expected True"), "fewer"),
    (re.compile(r"server_read is None, expected"), "no state"),
    (re.compile(r"the server answered (?P<got>\d+) reads, expected at most"), "extra reads"),
    (re.compile(r"the server answered (?P<got>\d+) reads, expected (?P<wanted>\d+)"), "reads"),
    (re.compile(r"present in the list"), "old"),
    (re.compile(r"missing from the list"), "no state"),
    (re.compile(r"the last observation is not a list"), "no state"),
    (re.compile(r"nothing was observed"), "no state"),
    (re.compile(r"stream is \S+, expected"), "no state"),
    (re.compile(r"untrusted messages counted"), "strictness"),
    (re.compile(r"the engine tracks \d+ URIs"), "extra reads"),
    (re.compile(r"the fleet counted"), "extra reads"),
    (re.compile(r"crashed: |did not finish within|not played: the driver|the driver "), "no state"),
]
_TEXT_STATES = frozenset({"fresh", "stale", "cited"})


Malformed = bool | Collection[str]
"""What a row's malformed answers carried: the version labels of their texts
(`malformed_text`), or ``True`` / ``False`` for "whatever was handed out" / "nothing"."""


def failure_class(
    failure: str, *, malformed_answer: Malformed = False, handed_text: bool = True
) -> Verdict | None:
    """The class of one failure line (``None``: not a failure line the runner writes,
    e.g. the actual column's own words in a ``why`` of ``matrix.json``);
    ``handed_text``: whether the client handed out text (or a list) at the end;
    ``malformed_answer``: `Malformed`. Old text is strictness only when it is what a
    malformed answer carried."""
    for pattern, rule in _RULES:
        found = pattern.search(failure)
        if found is None:
            continue
        verdict = _apply(rule, found, handed_text)
        if verdict == "old text" and _carried(failure, malformed_answer):
            return "strictness"
        return verdict
    return None


_CITED = re.compile(r"(?:cited |text is '.* @ )(v\d+)\b")


def _carried(failure: str, malformed_answer: Malformed) -> bool:
    """Whether the text ``failure`` says was handed out is one a malformed answer
    carried (a line that names no version: whenever one could have)."""
    if isinstance(malformed_answer, bool):
        return malformed_answer
    if not malformed_answer:
        return False
    cited = _CITED.search(failure)
    return cited is None or cited[1] in malformed_answer


def _apply(rule: str, found: re.Match[str], handed_text: bool) -> Verdict:
    match rule:
        case "old":
            return "old text"
        case "version":
            newer = _newer(found["got"].strip("'"), found["wanted"])
            return "extra reads" if newer else "old text"
        case "state":
            got, wanted = found["got"], found["wanted"]
            if got in _TEXT_STATES and wanted not in _TEXT_STATES:
                return "old text"
            if got == "fresh" and wanted == "stale":
                return "old text"  # handed out as current what is only a flagged copy
            return "no state"
        case "reads":
            if int(found["got"]) > int(found["wanted"]):
                return "extra reads"
            return "unproven" if handed_text else "no state"
        case "fewer":
            return "unproven" if handed_text else "no state"
        case "strictness" | "no state" | "extra reads":
            return rule
    raise AssertionError(rule)


def classify(
    failures: Iterable[str],
    *,
    malformed_answer: Malformed = False,
    handed_text: bool = True,
    observed_earlier: bool = False,
) -> Verdict | None:
    """The most serious class among ``failures`` (``None``: none is a failure line).

    Fewer server reads than the row needs is not counted against a client whose own
    final read went to the server (``server_read is True, expected False``): that read
    was sent after every change, so what it handed out was proven; only its cost
    differs from the row's. Unless the row observed text before (``observed_earlier``,
    `observed_before`): the missing read may be one that text needed."""
    lines = list(failures)
    own_read = not observed_earlier and any(
        "server_read is True, expected False" in line for line in lines
    )
    found = {
        failure_class(line, malformed_answer=malformed_answer, handed_text=handed_text)
        for line in lines
        if not (own_read and _FEWER.search(line))
    }
    return next((c for c in CLASSES if c in found), None)


_FEWER = re.compile(r"the server answered (\d+) reads, expected (\d+)$")


def hands_out_text(observed: str) -> bool:
    """Whether an observation's words (`describe`, or the actual column) say text or
    a list was handed out."""
    return observed.startswith(("cited", "fresh", "stale", "list of", "listed", "not listed"))


__all__ = [
    "CLASSES",
    "Malformed",
    "Verdict",
    "classify",
    "failure_class",
    "hands_out_text",
    "malformed",
    "malformed_text",
    "observed_before",
]
