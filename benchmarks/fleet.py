"""Fleet benchmark: 1, 4, 8 and 16 worker processes, without ``fleet=``, with a fleet on
one Valkey and with a fleet on a three-primary Valkey Cluster, side by side.

Against the official-SDK fixture server over HTTP and Valkey servers started here.
Reports, per row: server reads per change, the notification-to-every-worker latency
(median, p99 and max over ``--changes`` samples, 1,000 by default), the hit-path cost,
the listener lease's changes of hands while the samples ran (a lease that keeps lapsing
shows here: the fleet fails closed and makes no progress), and (fleet rows with > 1
worker) the time to a new listener after the old one is killed (SIGKILL).

A sample is one change: the clock starts just before the trigger (one HTTP client,
built once, sets the resource and notifies) and stops when the last worker has stopped
handing out the old version (it printed a state line that is not the old text, the
wall clock of the worker's own process). The next change waits until every worker
is fresh at the new version. Server reads are counted over the whole row (every
trigger's answer carries the server's read count), after the last re-reads landed.
The workers' lines are waited on, not polled, so this process takes no CPU from them.

    python benchmarks/fleet.py [--changes 1000] [--workers 1,4,8,16] [--stores single,cluster]

Writes the rows to ``benchmarks/results/fleet.json`` (with the machine and the load
average) and prints them side by side. Timing lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster_support import LocalCluster  # noqa: E402
from tests.conftest import SdkServer, start_sdk_server, stop_process  # noqa: E402
from tests.valkey_support import Valkey  # noqa: E402

URI = "bench://doc"


class Worker:
    """One `fleet_worker.py` process; its lines land in ``seen`` and tick ``arrived``."""

    def __init__(self, mcp: str, valkey: str, arrived: queue.SimpleQueue[None]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "fleet_worker.py"), mcp, URI, valkey],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.seen: list[dict[str, Any]] = []
        self._arrived = arrived
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.seen.append(json.loads(line))  # list.append is atomic: no lock needed
            self._arrived.put(None)

    def last(self, key: str) -> dict[str, Any] | None:
        return next((m for m in reversed(self.seen) if key in m), None)

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


def wait(
    check: Callable[[], bool],
    what: str,
    workers: list[Worker],
    arrived: queue.SimpleQueue[None],
    timeout: float = 60.0,
) -> None:
    """Wait until ``check`` holds, looking again each time a worker prints a line;
    after ``timeout`` say what was awaited and where each worker stood (a loaded
    2-core machine is slow, not wrong)."""
    deadline = time.monotonic() + timeout
    while not check():
        left = deadline - time.monotonic()
        if left <= 0:
            stood = [
                ((w.last("state") or {}).get("text"), (w.last("stream") or {}).get("stream"))
                for w in workers
            ]
            raise TimeoutError(f"{what} not met within {timeout:.0f} s; workers at {stood}")
        with contextlib.suppress(queue.Empty):
            arrived.get(timeout=min(left, 1.0))


def text_of(w: Worker) -> str | None:
    m = w.last("state")
    return None if m is None or m["state"] != "fresh" else m["text"]


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted samples (p99 of 1,000: the 990th)."""
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


class Trigger:
    """Changes the resource through the fixture's control endpoint on one client."""

    def __init__(self, sdk: SdkServer) -> None:
        self.url = sdk.control_url
        self.client = httpx.Client(timeout=30.0, trust_env=False)

    def set(self, text: str, *, notify: bool) -> dict[str, Any]:
        response = self.client.post(
            self.url, json={"op": "set", "uri": URI, "text": text, "notify": notify}
        )
        response.raise_for_status()
        state: dict[str, Any] = response.json()
        return state

    def reads(self) -> int:
        response = self.client.post(self.url, json={"op": "state"})
        response.raise_for_status()
        return int(response.json()["reads"].get(URI, 0))

    def close(self) -> None:
        self.client.close()


def leaders(w: Worker, since: float) -> list[float]:
    """When ``w`` took the listener lease after ``since`` (wall clock, its own lines)."""
    return [m["at"] for m in w.seen if m.get("leading") and m["at"] >= since]


def change(
    trigger: Trigger,
    workers: list[Worker],
    arrived: queue.SimpleQueue[None],
    i: int,
    *,
    read: bool = True,
) -> tuple[float, float | None]:
    """One sample: ``v{i}`` set and notified; the seconds until every worker stopped
    handing out ``v{i-1}``, and the fan-out hop alone (the listener not fresh -> the
    last worker not fresh; ``None`` without a known listener among several workers).
    Then (``read``) every worker reads until it hands out ``v{i}`` (`read_all`)."""
    old, new = f"v{i - 1}", f"v{i}"
    mark = [len(w.seen) for w in workers]
    sent = time.time()
    trigger.set(new, notify=True)

    def gone(w: Worker, m: int) -> list[dict[str, Any]]:
        return [x for x in w.seen[m:] if "state" in x and x["text"] != old]

    wait(
        lambda: all(gone(w, m) for w, m in zip(workers, mark, strict=True)),
        f"every worker stopped handing out {old}",
        workers,
        arrived,
    )
    firsts = [gone(w, m)[0]["at"] for w, m in zip(workers, mark, strict=True)]
    listener = [
        at
        for w, at in zip(workers, firsts, strict=True)
        if (w.last("leading") or {}).get("leading")
    ]
    hop = max(firsts) - listener[0] if len(listener) == 1 and len(workers) > 1 else None
    if read:
        read_all(workers, arrived, new)
    return max(firsts) - sent, hop


def read_all(workers: list[Worker], arrived: queue.SimpleQueue[None], text: str) -> None:
    """Every worker not handing out ``text`` reads it (``read`` on its stdin) until it
    does: a follower does not re-read what it heard on the fleet channel, its next
    read does (the listener re-reads what its own stream heard, for the fleet)."""
    for w in workers:
        if text_of(w) != text:
            w.tell("read")
    wait(
        lambda: all(text_of(w) == text for w in workers),
        f"every worker at {text}",
        workers,
        arrived,
    )


def start_workers(
    n: int, mcp: str, store: str, arrived: queue.SimpleQueue[None], trigger: Trigger
) -> list[Worker]:
    trigger.set("v0", notify=False)
    workers = [Worker(mcp, store, arrived) for _ in range(n)]
    # Starting N processes on a loaded machine takes a while (imports, first read).
    wait(
        lambda: all(text_of(w) == "v0" for w in workers),
        "every worker at v0",
        workers,
        arrived,
        300,
    )
    if store != "-" and n > 1:
        wait(
            lambda: any((w.last("leading") or {}).get("leading") for w in workers),
            "a listener",
            workers,
            arrived,
        )
    return workers


def row(n: int, store: str, store_url: str | None, changes: int) -> dict[str, Any]:
    fleet = store_url is not None
    sdk = start_sdk_server()
    trigger = Trigger(sdk)
    arrived: queue.SimpleQueue[None] = queue.SimpleQueue()
    workers: list[Worker] = []
    try:
        workers = start_workers(n, sdk.url, store_url or "-", arrived, trigger)
        trigger.set("v0", notify=False)  # a warm connection before the first sample
        reads_before = trigger.reads()
        began = time.time()
        latencies: list[float] = []
        hops: list[float] = []
        for i in range(1, changes + 1):
            took, hop = change(trigger, workers, arrived, i)
            latencies.append(took)
            if hop is not None:
                hops.append(hop)
        # Late re-reads (a worker re-reading after it already saw the new version)
        # land within a moment: count once the count stops moving.
        reads = trigger.reads()
        settle = time.monotonic() + 5.0
        while time.monotonic() < settle:
            time.sleep(0.2)
            now = trigger.reads()
            if now == reads:
                break
            reads = now
        # A lease that lapsed and was taken again while the samples ran.
        lease_takings = sum(len(leaders(w, began)) for w in workers)
        for w in workers:
            w.tell("hits")
        wait(
            lambda: all(w.last("hit_ns") for w in workers),
            "every hit figure",
            workers,
            arrived,
            300,
        )
        hit_ns = statistics.median(w.last("hit_ns")["hit_ns"] for w in workers)  # type: ignore[index]
        # Where the reads beyond one per change came from (direct reads, lease changes...).
        counters: dict[str, int] = {}
        for w in workers:
            for name, value in ((w.last("hit_ns") or {}).get("fleet") or {}).items():
                counters[name] = counters.get(name, 0) + value
        takeover = None
        if fleet and n > 1:
            leader = next(w for w in workers if (w.last("leading") or {}).get("leading"))
            killed = time.time()
            leader.proc.send_signal(signal.SIGKILL)
            rest = [w for w in workers if w is not leader]
            wait(lambda: any(leaders(w, killed) for w in rest), "a new listener", rest, arrived)
            takeover = min(at for w in rest for at in leaders(w, killed)) - killed
        latencies.sort()
        hops.sort()
        return {
            "workers": n,
            "fleet": fleet,
            "store": store if fleet else None,
            "samples": len(latencies),
            "reads_per_change": (reads - reads_before) / changes,
            "latency_median_ms": statistics.median(latencies) * 1000,
            "latency_p99_ms": percentile(latencies, 0.99) * 1000,
            "latency_max_ms": latencies[-1] * 1000,
            "fanout_hop_median_ms": statistics.median(hops) * 1000 if hops else None,
            "fanout_hop_p99_ms": percentile(hops, 0.99) * 1000 if hops else None,
            "lease_takings_during_samples": lease_takings if fleet else None,
            "hit_ns": hit_ns,
            "takeover_s": takeover,
            "fleet_counters": counters or None,
        }
    finally:
        trigger.close()
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait()
        stop_process(sdk.process)


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1000, help="samples per row")
    parser.add_argument("--workers", default="1,4,8,16")
    parser.add_argument(
        "--stores", default="single,cluster", help="fleet stores: single (Valkey), cluster"
    )
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "fleet.json"
    )
    args = parser.parse_args()
    stores = [x for x in args.stores.split(",") if x]
    load_before = [round(x, 2) for x in os.getloadavg()]
    valkey = Valkey()
    cluster = LocalCluster()
    rows: list[dict[str, Any]] = []
    try:
        urls: dict[str, str] = {}
        if "single" in stores:
            valkey.start()
            urls["single"] = valkey.url
        if "cluster" in stores:
            cluster.start()
            urls["cluster"] = cluster.url
        for n in [int(x) for x in args.workers.split(",")]:
            for store, url in [("none", None), *urls.items()]:
                try:
                    rows.append(row(n, store, url, args.changes))
                except TimeoutError as exc:  # reported as such, never hidden
                    rows.append(
                        {"workers": n, "fleet": url is not None, "store": store,
                         "did_not_finish": str(exc)}
                    )  # fmt: skip
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        valkey.stop()
        cluster.stop()
    load = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}
    plain = {r["workers"]: r for r in rows if not r["fleet"] and "hit_ns" in r}
    print(f"{machine()}; {args.changes} changes per row; load average {load}")
    print(
        f"{'workers':>7} {'fleet':>7} {'reads/change':>12} {'median ms':>9} {'p99 ms':>7} "
        f"{'max ms':>7} {'hop p50/p99':>11} {'lease takings':>13} {'hit ns':>7} "
        f"{'hit vs none':>11} {'new listener s':>14}"
    )
    for r in rows:
        fleet = r["store"] if r["fleet"] else "no"
        if "did_not_finish" in r:
            print(f"{r['workers']:>7} {fleet:>7}  did not finish: {r['did_not_finish']}")
            continue
        base = plain.get(r["workers"])
        ratio = "-" if base is None else f"{r['hit_ns'] / base['hit_ns']:.2f}"
        r["hit_vs_no_fleet"] = None if base is None else round(r["hit_ns"] / base["hit_ns"], 3)
        takeover = "-" if r["takeover_s"] is None else f"{r['takeover_s']:.2f}"
        hop = (
            "-"
            if r["fanout_hop_median_ms"] is None
            else f"{r['fanout_hop_median_ms']:.1f}/{r['fanout_hop_p99_ms']:.1f}"
        )
        takings = r["lease_takings_during_samples"]
        print(
            f"{r['workers']:>7} {fleet:>7} {r['reads_per_change']:>12.2f} "
            f"{r['latency_median_ms']:>9.1f} {r['latency_p99_ms']:>7.1f} "
            f"{r['latency_max_ms']:>7.1f} {hop:>11} {'-' if takings is None else takings:>13} "
            f"{r['hit_ns']:>7.0f} {ratio:>11} {takeover:>14}"
        )
    report = {
        "benchmark": "fleet",
        "machine": machine(),
        "changes": args.changes,
        "load_average": load,
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")
    os._exit(0)


if __name__ == "__main__":
    main()
