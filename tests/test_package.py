"""The shape of the package: a sans-IO core, a curated public surface."""

from __future__ import annotations

import ast
import re
import signal
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import freshcache

CORE = Path(freshcache.__file__).parent / "_core"
ALLOWED_IN_CORE = {
    "__future__",
    "collections",
    "dataclasses",
    "fnmatch",
    "hashlib",
    "itertools",
    "json",
    "random",
    "re",
    "time",
    "types",
    "typing",
    "typing_extensions",
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_core_imports_nothing_that_does_io():
    for path in sorted(CORE.glob("*.py")):
        outside = imported_modules(path) - ALLOWED_IN_CORE
        assert not outside, f"{path.name} imports {sorted(outside)}: the core must stay sans-IO"


def test_the_core_reaches_the_rest_of_the_package_only_for_errors():
    for path in sorted(CORE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module == "_errors", f"{path.name} imports ..{node.module}"


def test_public_names_are_sorted_and_all_importable():
    names = freshcache.__all__
    assert list(names) == sorted(names, key=lambda n: (not n.isupper(), n.startswith("_"), n))
    for name in names:
        assert hasattr(freshcache, name), name


def test_the_public_names_outside_checks_rely_on_exist():
    for name in (
        "FreshCache",
        "HttpSource",
        "StdioSource",
        "McpClientSource",
        "ReadResult",
        "Policy",
    ):
        assert name in freshcache.__all__, name


def test_public_classes_say_they_come_from_freshcache():
    for name in freshcache.__all__:
        value = getattr(freshcache, name)
        if isinstance(value, type):
            assert value.__module__ == "freshcache", name


def test_a_source_author_finds_every_event_and_reply_at_the_top():
    from freshcache._core import _events

    needed = {
        name
        for name, value in vars(_events).items()
        if isinstance(value, type)
        and value.__module__ in ("freshcache", _events.__name__)
        and name not in ("ReadResource", "Relist", "Relisten")  # decisions: the engine's
    }
    assert needed <= set(freshcache.__all__), sorted(needed - set(freshcache.__all__))


def test_the_package_ships_type_information():
    assert (Path(freshcache.__file__).parent / "py.typed").exists()


NOT_LOADED_BY_IMPORT = (
    "mcp",
    "opentelemetry.sdk",
    "uvicorn",
    "h11",
    # the test equipment: test doubles, table runner and vocabulary, test servers, worlds
    "freshcache.acceptance",
    "freshcache.testing",
    "freshcache.testing._reference",
    "freshcache.testing._memory",
    "freshcache.acceptance._format",
    "freshcache.acceptance._runner",
    "freshcache.acceptance._steps",
    "freshcache.acceptance._protocol",
    "freshcache.acceptance._http_server",
    "freshcache.acceptance._stdio_server",
    "freshcache.acceptance._http_world",
    "freshcache.acceptance._stdio_world",
    # the agent frameworks: each integration module imports its own
    "freshcache.integrations",
    "pydantic_ai",
    "agents",
    "langchain_core",
    "fastmcp",
)


def test_importing_freshcache_does_not_import_the_sdk_an_otel_sdk_or_the_test_equipment():
    code = (
        "import sys, freshcache, freshcache.sync; "
        f"bad = [m for m in {NOT_LOADED_BY_IMPORT!r} if m in sys.modules]; "
        "print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


LOADED_ON_FIRST_USE = (
    "httpx",
    "pydantic",
    "opentelemetry",
    "freshcache._middleware._cache",
    "freshcache._protocol._wire",
)


def test_importing_freshcache_loads_only_the_core_until_a_transport_or_the_cache_is_asked_for():
    code = (
        "import sys, freshcache; "
        f"early = [m for m in {LOADED_ON_FIRST_USE!r} if m in sys.modules]; "
        "freshcache.FreshCache; "
        "late = [m for m in ('freshcache._middleware._cache',) if m not in sys.modules]; "
        "print(early, late, freshcache.FreshCache.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] [] freshcache"


NOT_LOADED_BY_A_COMMAND_S_HELP = (
    "freshcache._core",
    "freshcache._middleware",
    "freshcache._sources",
    "freshcache._protocol",
    "freshcache.acceptance",
    "freshcache._proxy",
    "freshcache.fleet",
    "asyncio",
    "anyio",
    "httpx",
    "pydantic",
    "opentelemetry",
    "mcp",
    "dataclasses",
)


@pytest.mark.parametrize(
    "argv", [["--help"], ["acceptance", "--help"], ["proxy", "--help"], ["serve", "--help"]]
)
def test_a_command_s_help_imports_only_the_command_line(argv):
    # `import freshcache` loads the errors alone (issue 38, item 3): a command loads
    # the core, the cache and its transports when it runs, not to print its help.
    code = (
        "import runpy, sys; "
        f"sys.argv = ['freshcache', *{argv!r}]\n"
        "try:\n    runpy.run_module('freshcache', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"print([m for m in sys.modules if m.startswith({NOT_LOADED_BY_A_COMMAND_S_HELP!r})], "
        "file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "usage: freshcache" in done.stdout
    assert done.stderr.strip() == "[]"


def test_importing_freshcache_loads_the_core_on_the_first_core_name():
    code = (
        "import sys, freshcache; "
        "early = 'freshcache._core' in sys.modules; "
        "freshcache.ReadResult; "
        "late = 'freshcache._core' in sys.modules; "
        "print(early, late, 'freshcache._middleware._cache' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False True False"


NOT_LOADED_BY_THE_CACHE = (
    "httpx",
    "pydantic",
    "opentelemetry.propagate",
    "freshcache._sources._http",
    "freshcache._sources._stdio",
    "freshcache._sources._mcp_client",
    "freshcache._protocol._wire_models",
)


def test_from_freshcache_import_freshcache_loads_no_transport_and_no_wire_models():
    # The cache alone (0.53 s of CPU when it loaded every transport, pydantic and
    # OpenTelemetry's propagators): each loads when a source of it is made, or with
    # the first message parsed or request sent.
    code = (
        "import sys; from freshcache import FreshCache; "
        f"print([m for m in {NOT_LOADED_BY_THE_CACHE!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_wire_models_load_on_the_first_message_parsed():
    code = (
        "import sys; from freshcache._protocol import _wire; "
        "before = 'pydantic' in sys.modules; "
        "bad = _wire.parse_message({'jsonrpc': '1.0', 'id': 1}); "
        "good = _wire.parse_message({'jsonrpc': '2.0', 'id': 1, 'result': {}}); "
        "print(before, type(bad).__name__, type(good).__name__, 'pydantic' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False Malformed Response True"


def test_importing_freshcache_as_a_library_leaves_ctrl_c_alone():
    # Only the command line holds an early Ctrl-C (freshcache._startup).
    code = (
        "import signal, freshcache; from freshcache import FreshCache; "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    # Python installs its Ctrl-C handler only where SIGINT is not ignored, and a shell
    # starts background jobs with it ignored: the child starts with the default.
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.stdout.strip() == "True"


def test_every_public_name_is_listed_by_dir():
    assert set(freshcache.__all__) <= set(dir(freshcache))


def test_the_stdio_reference_server_imports_none_of_the_client():
    # It starts once per stdio case: it loads the reference server, the step vocabulary
    # and the core, never the cache, the transports or the pydantic wire models.
    heavy = (
        "freshcache._middleware._cache",
        "freshcache._sources._stdio",
        "freshcache._protocol._wire",
        "pydantic",
        "httpx",
    )
    code = (
        "import sys, freshcache.acceptance._stdio_server; "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_reference_server_spells_the_spec_names_as_the_client_does():
    from freshcache._core import CATALOG_FIELDS, ChangeHint
    from freshcache._protocol import _wire
    from freshcache.acceptance import _protocol
    from freshcache.acceptance._http_server import decode_header_value

    for name in (
        "PROTOCOL_VERSION",
        "META_PROTOCOL_VERSION",
        "META_SERVER_INFO",
        "META_SUBSCRIPTION_ID",
        "METHOD_NOT_FOUND",
        "INVALID_PARAMS",
        "INTERNAL_ERROR",
        "HEADER_MISMATCH",
        "UNSUPPORTED_PROTOCOL_VERSION",
    ):
        assert getattr(_protocol, name) == getattr(_wire, name), name
    assert dict(CATALOG_FIELDS) == _protocol.CATALOG_FIELDS
    assert typing.get_args(_protocol.ChangeHint) == typing.get_args(ChangeHint)
    for value in ("guide://a", "guide://é ü", "line\nbreak"):
        assert decode_header_value(_wire.encode_header_value(value)) == value


def test_every_set_of_running_totals_is_a_tally():
    """One concept for counters (issue 23): same shape, same reading as a whole."""
    from freshcache._core._counters import Tally
    from freshcache._core._engine import Counters
    from freshcache._fleet._parts import FleetCounters
    from freshcache._sources._sse import HttpStats
    from freshcache._sources._stdio import StdioCounters

    for kind in (Counters, HttpStats, StdioCounters, FleetCounters):
        totals = kind()
        assert isinstance(totals, Tally) and not hasattr(totals, "__dict__")
        before = totals.snapshot()
        name = next(iter(totals.as_dict()))
        setattr(totals, name, getattr(totals, name) + 1)
        assert totals.as_dict()[name] == before.as_dict()[name] + 1
        assert set(totals.as_dict()) == set(kind.__slots__)


# A declared runtime dependency's distribution name -> the module freshcache imports.
_IMPORT_NAMES = {"opentelemetry-api": "opentelemetry", "typing-extensions": "typing_extensions"}


def test_every_runtime_dependency_is_imported_by_the_library():
    """Issue 25: ``cachetools`` stayed a runtime dependency after the library stopped
    using it (only the benchmarks measure beside its ``TTLCache``, from the test extra)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    pyproject = Path(freshcache.__file__).parent.parent / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    used: set[str] = set()
    for path in Path(freshcache.__file__).parent.rglob("*.py"):
        used |= imported_modules(path)
    for requirement in declared:
        name = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()
        module = _IMPORT_NAMES.get(name, name.replace("-", "_"))
        assert module in used, (
            f"{requirement!r} is a runtime dependency nothing in freshcache imports"
        )
