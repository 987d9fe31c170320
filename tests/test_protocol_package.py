"""The protocol package stays sans-IO, and the transports leave its rules to it.

`_protocol/_client.py` (`ClientProtocol`), `_protocol/_http.py` (`HttpBinding`) and
`_protocol/_legacy.py` (`LegacySession`) make every MCP client decision
(docs/architecture.md, "Protocol decisions"); the byte-moving modules carry them out. These checks keep it so.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import freshcache

PACKAGE = Path(freshcache.__file__).parent
PROTOCOL = ("_protocol/_client.py", "_protocol/_http.py", "_protocol/_legacy.py")
TRANSPORTS = (
    "_sources/_http.py",
    "_sources/_http_legacy.py",
    "_sources/_stdio.py",
    "_sources/_mcp_client.py",
)
DOES_IO = {"anyio", "asyncio", "httpx", "h11", "os", "select", "socket", "subprocess", "trio"}
RULE_NAMES = {
    # error codes, parsers and judgments whose meaning is the protocol's to say
    "UNSUPPORTED_PROTOCOL_VERSION",
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "parse_message",
    "renegotiated_version",
    "_NOT_A_REFUSAL_CODES",
    "_REVISION_BLIND_STATUS",
    "_is_2025_refusal",
    "_listen_refused",
}
"""Each must exist (`test_every_rule_name_exists`): a name that was renamed away would
make the guard below one that cannot fire."""


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """The top-level modules ``path`` imports, and the names it imports from the package."""
    modules: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
            else:
                names.update(alias.name for alias in node.names)
    return modules, names


@pytest.mark.parametrize("name", PROTOCOL, ids=PROTOCOL)
def test_the_protocol_package_imports_nothing_that_does_io(name: str) -> None:
    modules, _ = _imports(PACKAGE / name)
    assert not modules & DOES_IO, f"{name} imports {sorted(modules & DOES_IO)}"


def _defined(path: Path) -> set[str]:
    """The names ``path`` defines at its top level (functions, classes, assignments)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_rule_name_exists() -> None:
    defined = set().union(*(_defined(path) for path in PACKAGE.rglob("*.py")))
    assert not RULE_NAMES - defined, f"no longer defined: {sorted(RULE_NAMES - defined)}"


@pytest.mark.parametrize("name", TRANSPORTS, ids=TRANSPORTS)
def test_a_transport_takes_no_protocol_rule_into_its_own_hands(name: str) -> None:
    _, names = _imports(PACKAGE / name)
    assert not names & RULE_NAMES, f"{name} imports {sorted(names & RULE_NAMES)}"


def test_the_2025_http_session_does_not_reach_back_into_the_http_source() -> None:
    """No import circle `_http` ↔ `_http_legacy`: `LegacyHttp` gets a `LegacyLink`."""
    tree = ast.parse((PACKAGE / "_sources" / "_http_legacy.py").read_text())
    modules = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
    }
    assert "_http" not in modules
