"""The benchmark charts: `python -m benchmarks.charts` runs on the committed results,
writes valid SVG that carries their figures, and the committed charts are what it
writes (so the pictures in docs/speed.md are the committed measurements)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CHARTS = ROOT / "docs" / "charts"
SVG = "{http://www.w3.org/2000/svg}"
COMMITTED = ["scale", "hit_path"] + [
    name for name in ("fleet", "costs") if (RESULTS / f"{name}.json").is_file()
]
"""The charts drawn from committed results (fleet's and costs' once their scripts ran)."""


def charts(results: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.charts", "--results", str(results), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    return [t.text or "" for t in root.iter(f"{SVG}text")]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("charts")
    done = charts(RESULTS, out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.mark.parametrize("name", COMMITTED)
def test_the_committed_results_give_valid_svg(drawn, name):
    assert (RESULTS / f"{name}.json").is_file(), f"benchmarks/results/{name}.json is committed"
    root = ET.parse(drawn / f"{name}.svg").getroot()
    assert root.tag == f"{SVG}svg"
    width, height = int(root.get("width", "0")), int(root.get("height", "0"))
    assert width > 300
    assert height > 200
    assert root.get("viewBox") == f"0 0 {width} {height}"
    shapes = [e for e in root.iter() if e.tag in (f"{SVG}polyline", f"{SVG}rect")]
    assert len(shapes) > 2
    for shape in root.iter():
        for attribute in ("x", "y", "width", "height", "cx", "cy"):
            if shape.get(attribute) is not None:
                value = float(shape.get(attribute, "0"))
                assert -1 <= value <= max(width, height) + 1, (name, shape.tag, attribute)


@pytest.mark.parametrize("name", COMMITTED)
def test_the_committed_charts_are_the_committed_results_drawn(drawn, name):
    chart = CHARTS / f"{name}.svg"
    assert chart.is_file(), f"docs/charts/{name}.svg is missing: python -m benchmarks.charts"
    committed = chart.read_text(encoding="utf-8")
    assert committed == (drawn / f"{name}.svg").read_text(encoding="utf-8"), (
        f"docs/charts/{name}.svg is out of date: python -m benchmarks.charts"
    )


def test_the_hit_chart_carries_the_measured_figures(drawn):
    measured = json.loads((RESULTS / "hit_path.json").read_text())["ns_per_call"]
    words = " ".join(texts(drawn / "hit_path.svg"))
    floor = measured["awaited_dict_lookup"]
    hit = measured["freshcache_read_hit"]
    assert f"{hit:.1f} ns ({hit / floor:.1f}x the floor)" in words
    assert "awaited dict lookup (the floor)" in words
    assert "cachetools.TTLCache lookup" in words


def test_the_fleet_chart_plots_each_series_and_names_rows_that_did_not_finish(tmp_path):
    rows = [
        {"workers": n, "fleet": fleet, "reads_per_change": float(n if not fleet else 1)}
        for n in (1, 4, 8)
        for fleet in (False, True)
    ]
    rows[-1] = {"workers": 8, "fleet": True, "did_not_finish": "benchmark condition not met"}
    report = {"benchmark": "fleet", "machine": "2 cores, Test CPU, Python 3", "rows": rows}
    (tmp_path / "fleet.json").write_text(json.dumps(report))
    done = charts(tmp_path, tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "scale.svg: skipped" in done.stdout
    root = ET.parse(tmp_path / "out" / "fleet.svg").getroot()
    lines = list(root.iter(f"{SVG}polyline"))
    assert len(lines) == 2
    without, with_fleet = (len(line.get("points", "").split()) for line in lines)
    assert (without, with_fleet) == (3, 2)
    words = " ".join(texts(tmp_path / "out" / "fleet.svg"))
    assert "did not finish: 8 workers with fleet" in words
    assert "2 cores, Test CPU, Python 3" in words


def test_the_fleet_chart_draws_one_valkey_and_the_cluster_as_their_own_series(tmp_path):
    rows = [
        {"workers": n, "fleet": store != "none", "store": None if store == "none" else store,
         "reads_per_change": float(n if store == "none" else 1)}
        for n in (1, 4, 8, 16)
        for store in ("none", "single", "cluster")
    ]  # fmt: skip
    rows[-1] = {"workers": 16, "fleet": True, "store": "cluster", "did_not_finish": "lapsed"}
    report = {"benchmark": "fleet", "machine": "2 cores, Test CPU, Python 3", "rows": rows}
    (tmp_path / "fleet.json").write_text(json.dumps(report))
    done = charts(tmp_path, tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    root = ET.parse(tmp_path / "out" / "fleet.svg").getroot()
    points = [len(line.get("points", "").split()) for line in root.iter(f"{SVG}polyline")]
    assert points == [4, 4, 3]
    words = " ".join(texts(tmp_path / "out" / "fleet.svg"))
    assert "with fleet= (Valkey Cluster)" in words
    assert "did not finish: 16 workers with fleet, cluster" in words


def test_a_missing_results_folder_is_a_one_line_error(tmp_path):
    done = charts(tmp_path / "nope", tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr.strip() == f"charts: no folder {tmp_path / 'nope'}"
