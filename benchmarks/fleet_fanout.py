"""Issue 25's fleet row alone: ``resources/updated`` -> every fleet worker not fresh,
beside the raw Valkey pub/sub floor measured in the same run (`costs.fleet_rows`).

    python benchmarks/fleet_fanout.py [--workers 8] [--samples 1000] [--rounds 5]
                                      [--label before|after] [--json PATH]

Prints the pooled median / p99 of the four kinds of sample (the raw floor, the SSE
floor: the same server's notification through a plain SSE client that publishes it raw,
the fleet end to end, the fleet channel hop alone), each round's p99 ratio (the spread on
a shared machine; the end-to-end row also against the SSE floor), the CPU each group of
processes used per sample of each kind (and, apart, the reads that make every worker
fresh again after a fleet sample: a follower re-reads lazily, on its next read), the
fleet workers' CPU per change against the raw subscribers' and the load average
before and after; writes them to
``benchmarks/results/fleet_fanout.json`` under ``--label`` (other labels are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.costs import fleet_rows  # noqa: E402
from benchmarks.fleet import machine  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--samples", type=int, default=1000, help="of each kind")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default="now")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "fleet_fanout.json"
    )
    args = parser.parse_args()
    before = [round(x, 2) for x in os.getloadavg()]
    rows = fleet_rows(args.workers, args.samples, args.rounds)
    load = {"before": before, "after": [round(x, 2) for x in os.getloadavg()]}
    print(f"{machine()}; {args.workers} workers; load average {load}")
    for kind, name in (("floor", "raw pub/sub floor"), ("sse_floor", "SSE floor"),
                       ("fleet", "fleet end to end"), ("channel", "fleet channel hop")):  # fmt: skip
        p50, p99 = rows[f"{kind}_p50_ms"], rows[f"{kind}_p99_ms"]
        ratio = "" if kind == "floor" else f"  p99 {p99 / rows['floor_p99_ms']:.2f}x the floor"
        if kind == "fleet":
            ratio += f", {p99 / rows['sse_floor_p99_ms']:.2f}x the SSE floor"
        print(f"{name:<20} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms{ratio}")
    for key in (
        "end_to_end_p99_ratio_by_round",
        "channel_p99_ratio_by_round",
        "sse_floor_p99_ratio_by_round",
        "end_to_end_vs_sse_floor_p99_ratio_by_round",
    ):
        print(f"{key}: {rows[key]}")
    print("CPU ms per sample, by group of processes (where the time goes on 2 cores):")
    for kind, used in rows["cpu_ms_per_sample"].items():
        print(f"  {kind:<11} " + ", ".join(f"{group} {ms:.2f}" for group, ms in used.items()))
    print("CPU ms of the reads after each fleet sample (every worker fresh again), apart:")
    for kind, used in rows["read_cpu_ms_per_sample"].items():
        print(f"  {kind:<11} " + ", ".join(f"{group} {ms:.2f}" for group, ms in used.items()))
    floor_cpu = rows["cpu_ms_per_sample"]["floor"]["floor_subscribers"]
    for kind in ("channel", "end_to_end"):
        workers_cpu = rows["cpu_ms_per_sample"][kind]["fleet_workers"]
        print(
            f"fleet workers' CPU per change ({kind}): {workers_cpu:.2f} ms, "
            f"{workers_cpu / max(floor_cpu, 1e-9):.2f}x the raw subscribers' {floor_cpu:.2f} ms"
        )
    report: dict[str, object] = {}
    if args.json.exists():
        report = json.loads(args.json.read_text())
    report.update({"benchmark": "fleet_fanout", "machine": machine()})
    runs = report.setdefault("runs", {})
    assert isinstance(runs, dict)
    runs[args.label] = {"workers": args.workers, "load_average": load, **rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")
    os._exit(0)


if __name__ == "__main__":
    main()
