"""Draw the benchmarks' side-by-side results as SVG charts under ``docs/charts/``.

    python -m benchmarks.charts [--results benchmarks/results] [--out docs/charts]

Reads the JSON files the benchmark scripts write (``scale.json``, ``hit_path.json``,
``fleet.json``) and writes one chart for each file present:

- ``scale.svg``: cost per URI (entering, the acknowledgment, re-reading after a drop)
  and per notification against the selection size (``benchmarks/scale.py``);
- ``hit_path.svg``: a fresh hit against its anchors, an awaited dict lookup (the floor)
  and ``cachetools.TTLCache`` (``hit_path.py``; the sync and private-principal hits
  from ``scale.py``);
- ``fleet.svg``: server reads per change against the number of workers, with and
  without ``fleet=`` (``benchmarks/fleet.py``);
- ``costs.svg``: each cost as a multiple of its floor, before and after
  (``benchmarks/costs.py``: ``costs.json``, ``costs_before.json``).

The SVG is written by hand (a few shapes and text, no plotting library): the files
are small, the same input gives the same bytes, and a change of figures shows as a
readable diff. Not part of freshcache: nothing here is imported by the library.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "charts"

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
ANCHOR = "#9e9e9e"
FONT = 'font-family="Helvetica, Arial, sans-serif"'


@dataclass
class Svg:
    """A drawing: shapes appended in order, written one per line."""

    width: int
    height: int
    shapes: list[str] = field(default_factory=list)

    def line(
        self,
        x1: float,
        y1: float,
        x2: float,
        y2: float,
        colour: str = "#000",
        width: float = 1,
        dash: str | None = None,
    ) -> None:
        style = f' stroke-dasharray="{dash}"' if dash else ""
        self.shapes.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{colour}" stroke-width="{width}"{style}/>'
        )

    def rect(self, x: float, y: float, w: float, h: float, colour: str) -> None:
        self.shapes.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{h:.1f}" '
            f'fill="{colour}"/>'
        )

    def polyline(self, points: Sequence[tuple[float, float]], colour: str) -> None:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        self.shapes.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        for x, y in points:
            self.shapes.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>')

    def text(
        self,
        x: float,
        y: float,
        words: str,
        *,
        size: int = 12,
        anchor: str = "start",
        colour: str = "#222",
        bold: bool = False,
        rotate: bool = False,
    ) -> None:
        weight = ' font-weight="bold"' if bold else ""
        turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
        self.shapes.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{colour}"{weight}{turn} {FONT}>{escape(words)}</text>'
        )

    def render(self) -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
            f'height="{self.height}" viewBox="0 0 {self.width} {self.height}">'
        )
        background = f'<rect width="{self.width}" height="{self.height}" fill="#fff"/>'
        return "\n".join([head, background, *self.shapes, "</svg>"]) + "\n"


def _ticks(top: float) -> list[float]:
    """Round tick values from 0 to at least ``top`` (about five of them)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / 5
    step = 10 ** math.floor(math.log10(raw))
    for nice in (1, 2, 2.5, 5, 10):
        if raw <= nice * step:
            step *= nice
            break
    count = math.ceil(top / step - 1e-9)
    return [i * step for i in range(count + 1)]


def _number(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]


def line_chart(
    title: str, subtitle: str, x_label: str, y_label: str, series: Sequence[Series], *, log_x: bool
) -> str:
    """Lines over a shared x axis (logarithmic or not), the y axis from 0."""
    svg = Svg(780, 430)
    left, right, top, bottom = 70, 230, 62, 356
    xs = sorted({x for s in series for x, _ in s.points})
    ys = [y for s in series for _, y in s.points]
    ticks = _ticks(max(ys) * 1.05)
    y_top = ticks[-1]

    def fx(x: float) -> float:
        lo, hi = (math.log10(xs[0]), math.log10(xs[-1])) if log_x else (xs[0], xs[-1])
        at = math.log10(x) if log_x else x
        return left + (right_edge - left) * (0.5 if hi == lo else (at - lo) / (hi - lo))

    def fy(y: float) -> float:
        return bottom - (bottom - top) * y / y_top

    right_edge = svg.width - right
    svg.text(left, 24, title, size=16, bold=True)
    svg.text(left, 44, subtitle, size=11, colour="#555")
    for tick in ticks:
        svg.line(left, fy(tick), right_edge, fy(tick), "#e5e5e5")
        svg.text(left - 8, fy(tick) + 4, _number(tick), size=11, anchor="end")
    previous = -math.inf
    for x in xs:
        svg.line(fx(x), bottom, fx(x), bottom + 5)
        crowded = fx(x) - previous < 50  # a label too near the last one goes a line lower
        svg.text(fx(x), bottom + (33 if crowded else 19), _number(x), size=11, anchor="middle")
        previous = -math.inf if crowded else fx(x)
    svg.line(left, bottom, right_edge, bottom)
    svg.line(left, top, left, bottom)
    svg.text((left + right_edge) / 2, bottom + 56, x_label, size=12, anchor="middle")
    svg.text(18, (top + bottom) / 2, y_label, size=12, anchor="middle", rotate=True)
    for index, one in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        svg.polyline([(fx(x), fy(y)) for x, y in one.points], colour)
        legend_y = top + 8 + index * 22
        svg.line(right_edge + 16, legend_y, right_edge + 36, legend_y, colour, width=2)
        svg.text(right_edge + 42, legend_y + 4, one.name, size=11)
    return svg.render()


@dataclass
class Bar:
    label: str
    value: float
    anchor: bool
    note: str = ""


def bar_chart(title: str, subtitle: str, unit: str, bars: Sequence[Bar]) -> str:
    """Horizontal bars, freshcache's in colour, the anchors in grey."""
    row, left, top = 30, 300, 62
    svg = Svg(760, top + row * len(bars) + 54)
    right_edge = svg.width - 150
    ticks = _ticks(max(b.value for b in bars) * 1.05)
    scale = (right_edge - left) / ticks[-1]
    bottom = top + row * len(bars)
    svg.text(16, 24, title, size=16, bold=True)
    svg.text(16, 44, subtitle, size=11, colour="#555")
    for tick in ticks:
        svg.line(left + tick * scale, top, left + tick * scale, bottom, "#e5e5e5")
        svg.text(left + tick * scale, bottom + 16, _number(tick), size=11, anchor="middle")
    svg.text((left + right_edge) / 2, bottom + 36, unit, size=12, anchor="middle")
    for index, bar in enumerate(bars):
        y = top + index * row
        svg.text(left - 8, y + row / 2 + 4, bar.label, size=11, anchor="end")
        svg.rect(left, y + 5, bar.value * scale, row - 10, ANCHOR if bar.anchor else COLOURS[0])
        figure = f"{_number(bar.value)}{(' ' + bar.note) if bar.note else ''}"
        svg.text(left + bar.value * scale + 6, y + row / 2 + 4, figure, size=11)
    svg.line(left, top, left, bottom)
    return svg.render()


# ---------------------------------------------------------------------- the charts


def machine_of(report: dict[str, Any]) -> str:
    machine = report.get("machine")
    if isinstance(machine, str):
        return machine
    if isinstance(machine, dict):
        cpu = f", {machine['cpu']}" if machine.get("cpu") else ""
        return f"{machine.get('cpus', '?')} cores{cpu}, Python {machine.get('python', '?')}"
    return "machine not recorded"


def scale_chart(report: dict[str, Any]) -> str:
    sizes = sorted(report["scale"], key=int)
    parts = [report["scale"][s] for s in sizes]

    def series(name: str, part: str, key: str) -> Series:
        points = [
            (float(s), float(p[part][key]))
            for s, p in zip(sizes, parts, strict=True)
            if part in p and key in p[part]
        ]
        return Series(name, points)

    subtitle = f"benchmarks/scale.py, in-memory reference server, one run; {machine_of(report)}"
    if report.get("over_budget"):
        subtitle += f"; over the time budget: {', '.join(report['over_budget'])}"
    return line_chart(
        "Cost per URI against the selection size",
        subtitle,
        "URIs selected (log scale)",
        "µs",
        [
            series("enter, per URI", "enter", "per_uri_us"),
            series("re-read after a drop, per URI", "reconnect", "per_uri_us"),
            series("per notification", "notify", "median_us"),
            series("ack handling, per URI", "enter", "ack_us_per_uri"),
        ],
        log_x=True,
    )


def hit_chart(hit_path: dict[str, Any], scale: dict[str, Any] | None) -> str:
    ns = hit_path["ns_per_call"]
    floor = ns["awaited_dict_lookup"]

    def times(value: float) -> str:
        return f"ns ({value / floor:.1f}x the floor)"

    bars = [
        Bar("awaited dict lookup (the floor)", floor, True, "ns"),
        Bar(
            "await cache.read(uri), fresh hit",
            ns["freshcache_read_hit"],
            False,
            times(ns["freshcache_read_hit"]),
        ),
        Bar(
            "cachetools.TTLCache lookup", ns["ttlcache_lookup"], True, times(ns["ttlcache_lookup"])
        ),
    ]
    if "freshcache_hit_sdk_untraced" in ns:
        bars.append(
            Bar(
                "fresh hit, OpenTelemetry SDK installed",
                ns["freshcache_hit_sdk_untraced"],
                False,
                times(ns["freshcache_hit_sdk_untraced"]),
            )
        )
    hits = (scale or {}).get("hits") or {}
    if "sync_hit_ns" in hits and "locked_dict_ns" in hits:
        bars.append(Bar("threading.Lock-guarded dict lookup", hits["locked_dict_ns"], True, "ns"))
        bars.append(
            Bar(
                "SyncFreshCache.read, fresh hit",
                hits["sync_hit_ns"],
                False,
                f"ns ({hits['sync_hit_ns'] / hits['locked_dict_ns']:.1f}x the lock)",
            )
        )
    if "private_hit_ns" in hits:
        bars.append(Bar('read(uri, principal="alice")', hits["private_hit_ns"], False, "ns"))
    traced = ns.get("freshcache_hit_sdk_traced")
    subtitle = f"hit_path.py (scale.py for the sync and principal rows); {machine_of(hit_path)}"
    if traced is not None:
        subtitle += f"; a traced hit (a span each): {traced / 1000:,.0f} µs, off this scale"
    return bar_chart("A fresh hit against its anchors", subtitle, "ns per call", bars)


def fleet_chart(report: dict[str, Any]) -> str:
    rows = report["rows"] if isinstance(report, dict) else report
    done = [r for r in rows if "reads_per_change" in r]

    def store(r: dict[str, Any]) -> str:
        # Rows from before the cluster rows have no "store": one Valkey.
        return "none" if not r["fleet"] else str(r.get("store") or "single")

    lines = [
        Series(
            name,
            sorted(
                (float(r["workers"]), float(r["reads_per_change"]))
                for r in done
                if store(r) == kind
            ),
        )
        for name, kind in (
            ("without fleet=", "none"),
            ("with fleet= (Valkey)", "single"),
            ("with fleet= (Valkey Cluster)", "cluster"),
        )
    ]
    unfinished = [r for r in rows if "reads_per_change" not in r]
    subtitle = f"benchmarks/fleet.py, official SDK server over HTTP; {machine_of(report)}"
    if unfinished:
        subtitle += "; did not finish: " + ", ".join(
            f"{r['workers']} workers{'' if store(r) == 'none' else ' with fleet, ' + store(r)}"
            for r in unfinished
        )
    return line_chart(
        "Server reads per change against workers",
        subtitle,
        "worker processes",
        "server reads per change",
        [s for s in lines if s.points],
        log_x=False,
    )


def costs_chart(after: dict[str, Any], before: dict[str, Any] | None) -> str:
    """Each row of ``costs.py`` as its ratio to the floor measured in the same run,
    before (grey) and after (colour); the traced hit is off this scale (subtitle)."""
    earlier = {r["what"]: r for r in (before or {}).get("rows", [])}
    bars: list[Bar] = []
    traced = None
    for r in after["rows"]:
        if r["what"].startswith("traced hit"):
            traced = r
            continue
        old = earlier.get(r["what"])
        if old is not None:
            bars.append(_ratio_bar(f"{r['what']}, before", old["ratio_to_floor"], True))
        bars.append(_ratio_bar(r["what"], r["ratio_to_floor"], False))
    load_note = (after.get("load_average") or {}).get("before", "?")
    subtitle = f"benchmarks/costs.py, CPU time, interleaved; load average {load_note}"
    if traced is not None:
        subtitle += f"; traced hit {traced['ratio_to_floor']:.0f}x the untraced one"
    return bar_chart("Each cost as a multiple of its floor", subtitle, "x the floor", bars)


_RATIO_CAP = 10.0
"""Ratios beyond this are drawn at it, their figure named (a 70 µs thread hop beside
a 44 ns dict lookup would flatten every other bar)."""


def _ratio_bar(label: str, ratio: float, anchor: bool) -> Bar:
    if ratio > _RATIO_CAP:
        return Bar(label, _RATIO_CAP, anchor, f"x: off this scale, {ratio:,.0f}x")
    return Bar(label, ratio, anchor, "x")


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def draw(results: Path, out: Path) -> list[Path]:
    """Write every chart whose results are in ``results``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    scale, hit_path, fleet = (load(results / f"{n}.json") for n in ("scale", "hit_path", "fleet"))
    charts: list[tuple[str, str | None]] = [
        ("scale.svg", scale_chart(scale) if scale else None),
        ("hit_path.svg", hit_chart(hit_path, scale) if hit_path else None),
        ("fleet.svg", fleet_chart(fleet) if fleet else None),
    ]
    costs = load(results / "costs.json")
    if costs:
        charts.append(("costs.svg", costs_chart(costs, load(results / "costs_before.json"))))
    written = []
    for name, svg in charts:
        if svg is None:
            print(f"{name}: skipped, its results file is not in {results}")
            continue
        (out / name).write_text(svg, encoding="utf-8")
        written.append(out / name)
        print(f"wrote {out / name}")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the benchmarks' JSON")
    parser.add_argument("--out", type=Path, default=OUT, help="where the SVG files go")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        print(f"charts: no folder {args.results}", file=sys.stderr)
        return 2
    try:
        written = draw(args.results, args.out)
    except (KeyError, TypeError, ValueError) as exc:
        print(f"charts: a results file is not in the shape expected ({exc!r})", file=sys.stderr)
        return 2
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
