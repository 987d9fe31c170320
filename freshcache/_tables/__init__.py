"""Acceptance tables: the file format, the step vocabulary and the runner (DESIGN §3)."""

from ._format import Case, CaseRow, load_cases, parse_text, table_files
from ._runner import CaseReport, EngineWorld, Setup, VirtualClock, World, describe, play

__all__ = [
    "Case",
    "CaseReport",
    "CaseRow",
    "EngineWorld",
    "Setup",
    "VirtualClock",
    "World",
    "describe",
    "load_cases",
    "parse_text",
    "play",
    "table_files",
]
