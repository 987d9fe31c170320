"""The virtual environment of the official SDK 1.x peer (`tests/fixtures/sdk1_server.py`).

The project's own test extra keeps SDK 2.x, so the 1.x server runs in a venv of its
own, created by the tests on first use and reused after: under the pytest cache
(``.pytest_cache/d/freshcache-sdk1/<key>``), keyed by the pin and the Python version;
``FRESHCACHE_SDK1_VENV`` names another place. Creating it needs the package index
(PyPI or the configured mirror) once; when that fails the tests that need it are
skipped with pip's reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SDK1_REQUIREMENTS = ("mcp>=1.20,<2", "uvicorn>=0.30")
"""What the SDK 1.x peer's venv holds (starlette and anyio come with mcp)."""


class Sdk1Unavailable(RuntimeError):
    """The SDK 1.x venv could not be created (the message says why)."""


def venv_key() -> str:
    pin = "\n".join((*SDK1_REQUIREMENTS, sys.version))
    return hashlib.sha256(pin.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One creator at a time (two pytest runs may start together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def sdk1_python(cache_root: Path) -> Path:
    """The Python of the SDK 1.x venv under ``cache_root``, created once (minutes at
    most) and reused while the pin stays the same."""
    override = os.environ.get("FRESHCACHE_SDK1_VENV")
    venv = Path(override) if override else cache_root / venv_key()
    python = venv / "bin" / "python"
    ready = venv / ".freshcache-ready"
    if ready.exists():
        return python
    with _locked(venv.with_name(venv.name + ".lock")):
        if ready.exists():
            return python
        # uv, where this interpreter has it (CI installs it), makes the venv and fills
        # it in seconds; pip takes half a minute and more.
        uv = importlib.util.find_spec("uv") is not None
        shutil.rmtree(venv, ignore_errors=True)  # a venv a failed attempt left
        make = ["-m", "uv", "venv", "--quiet"] if uv else ["-m", "venv"]
        subprocess.run([sys.executable, *make, str(venv)], check=True)
        install = (
            [sys.executable, "-m", "uv", "pip", "install", "--python", str(python)]
            if uv
            else [str(python), "-m", "pip", "install"]
        )
        try:
            done = subprocess.run(
                [*install, "--quiet", *SDK1_REQUIREMENTS],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise Sdk1Unavailable("pip did not finish within 15 minutes") from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise Sdk1Unavailable(
                f"pip install {' '.join(SDK1_REQUIREMENTS)} failed: {' | '.join(tail)}"
            )
        version = subprocess.run(
            [str(python), "-c", "import mcp, importlib.metadata as m; print(m.version('mcp'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not version.startswith("1."):
            raise Sdk1Unavailable(f"the venv holds mcp {version}, not 1.x")
        ready.write_text(f"mcp {version}\n")
    return python
