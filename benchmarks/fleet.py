"""Fleet benchmark: 1, 4 and 8 worker processes, with and without ``fleet=``, side by side.

Against the official-SDK fixture server over HTTP and a Valkey server started here.
Reports, per row: server reads per change, notification-to-every-worker-not-fresh
latency (median, p99), the hit-path cost, and (fleet rows with > 1 worker) the time
to a new listener after the old one is killed (SIGKILL).

    python benchmarks/fleet.py [--changes 20] [--workers 1,4,8]

Writes the rows to ``benchmarks/results/fleet.json`` (with the machine) and prints them
side by side. Timing lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import start_sdk_server, stop_process  # noqa: E402
from tests.valkey_support import Valkey  # noqa: E402

URI = "bench://doc"


class Worker:
    def __init__(self, mcp: str, valkey: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "fleet_worker.py"), mcp, URI, valkey],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[dict] = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def drain(self) -> list[dict]:
        while True:
            try:
                self.seen.append(self.lines.get_nowait())
            except queue.Empty:
                return self.seen

    def last(self, key: str) -> dict | None:
        return next((m for m in reversed(self.drain()) if key in m), None)

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


def wait(check, what: str, workers: list[Worker], timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    """Poll ``check`` until it holds; after ``timeout`` say what was awaited and where
    each worker stood (a loaded 2-core machine is slow, not wrong)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            stood = [
                ((w.last("state") or {}).get("text"), (w.last("stream") or {}).get("stream"))
                for w in workers
            ]
            raise TimeoutError(f"{what} not met within {timeout:.0f} s; workers at {stood}")
        time.sleep(0.002)


def text_of(w: Worker) -> str | None:
    m = w.last("state")
    return None if m is None or m["state"] != "fresh" else m["text"]


def row(n: int, fleet: bool, changes: int, valkey: Valkey) -> dict:
    sdk = start_sdk_server()
    workers: list[Worker] = []
    try:
        sdk.control("set", uri=URI, text="v0", notify=False)
        workers = [Worker(sdk.url, valkey.url if fleet else "-") for _ in range(n)]
        # Starting N processes on a loaded machine takes a while (imports, first read).
        wait(lambda: all(text_of(w) == "v0" for w in workers), "every worker at v0", workers, 180)
        latencies, reads = [], []
        for i in range(1, changes + 1):
            before = sdk.reads(URI)
            mark = [len(w.drain()) for w in workers]
            sent = time.time()
            sdk.control("set", uri=URI, text=f"v{i}", notify=True)
            wait(
                lambda i=i: all(text_of(w) == f"v{i}" for w in workers),
                f"every worker at v{i}",
                workers,
            )
            firsts = []
            for w, m in zip(workers, mark, strict=True):
                gone = [x for x in w.seen[m:] if "state" in x and x["text"] != f"v{i - 1}"]
                firsts.append(gone[0]["at"] if gone else sent)
            latencies.append(max(firsts) - sent)
            time.sleep(0.05)  # let late re-reads land before counting
            reads.append(sdk.reads(URI) - before)
        for w in workers:
            w.tell("hits")
        wait(lambda: all(w.last("hit_ns") for w in workers), "every hit figure", workers, 300)
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
            wait(
                lambda: any((w.last("leading") or {}).get("leading") for w in rest),
                "a new listener",
                rest,
            )
            takeover = max((w.last("leading") or {}).get("at", killed) for w in rest) - killed
        latencies.sort()
        return {
            "workers": n,
            "fleet": fleet,
            "reads_per_change": statistics.mean(reads),
            "latency_median_ms": statistics.median(latencies) * 1000,
            "latency_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            "hit_ns": hit_ns,
            "takeover_s": takeover,
            "fleet_counters": counters or None,
        }
    finally:
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
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--workers", default="1,4,8")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "fleet.json"
    )
    args = parser.parse_args()
    valkey = Valkey()
    valkey.start()
    rows: list[dict] = []
    try:
        for n in [int(x) for x in args.workers.split(",")]:
            for fleet in (False, True):
                try:
                    rows.append(row(n, fleet, args.changes, valkey))
                except TimeoutError as exc:  # reported as such, never hidden
                    rows.append({"workers": n, "fleet": fleet, "did_not_finish": str(exc)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        valkey.stop()
    plain = {r["workers"]: r for r in rows if not r["fleet"] and "hit_ns" in r}
    print(f"{machine()}; {args.changes} changes per row")
    print(
        f"{'workers':>7} {'fleet':>5} {'reads/change':>12} {'median ms':>9} {'p99 ms':>7} "
        f"{'hit ns':>7} {'hit vs no fleet':>15} {'new listener s':>14}"
    )
    for r in rows:
        if "did_not_finish" in r:
            print(
                f"{r['workers']:>7} {'yes' if r['fleet'] else 'no':>5}  did not finish: "
                f"{r['did_not_finish']}"
            )
            continue
        base = plain.get(r["workers"])
        ratio = "-" if base is None else f"{r['hit_ns'] / base['hit_ns']:.2f}"
        r["hit_vs_no_fleet"] = None if base is None else round(r["hit_ns"] / base["hit_ns"], 3)
        takeover = "-" if r["takeover_s"] is None else f"{r['takeover_s']:.2f}"
        print(
            f"{r['workers']:>7} {'yes' if r['fleet'] else 'no':>5} {r['reads_per_change']:>12.2f} "
            f"{r['latency_median_ms']:>9.1f} {r['latency_p99_ms']:>7.1f} {r['hit_ns']:>7.0f} "
            f"{ratio:>15} {takeover:>14}"
        )
    report = {"benchmark": "fleet", "machine": machine(), "changes": args.changes, "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")
    os._exit(0)


if __name__ == "__main__":
    main()
