"""The official TypeScript SDK 2.x client, for the tests that use it: the copy the
grader's TypeScript driver installs (``freshcache/acceptance/drivers/typescript``,
from its lock file), shared by the driver's tests and the proxy's TypeScript host."""

from __future__ import annotations

import shutil
import subprocess

from freshcache.acceptance.drivers import HERE, Unavailable, command_for


def typescript_ready() -> str | None:
    """Why the TypeScript SDK client cannot run here (``None``: it can); installs it
    from the driver's lock file when Node and npm are there but the modules are not."""
    try:
        command_for("typescript")
        return None
    except Unavailable as exc:
        if shutil.which("node") is None or shutil.which("npm") is None:
            return str(exc)
    done = subprocess.run(
        ["npm", "ci", "--silent", "--prefix", str(HERE / "typescript")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return None if done.returncode == 0 else f"npm ci failed: {done.stderr.strip()[-200:]}"
