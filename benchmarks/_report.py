"""The JSON report `sync_hit.py` and `traced_hit.py` print (and write with ``--json``):
their figures, the load average and the machine they ran on."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any


def machine() -> str:
    """The processor and the Python that ran the benchmark."""
    return f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"


def emit(figures: dict[str, Any], path: Path | None) -> dict[str, Any]:
    """Print ``figures`` with the load average and the machine as JSON; also write it
    to ``path`` when given. Returns the whole report."""
    report = {
        **figures,
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "machine": machine(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if path is not None:
        path.write_text(text + "\n", encoding="utf-8")
    return report
