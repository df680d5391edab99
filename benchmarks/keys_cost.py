"""What keys (CurveZMQ) cost: the same workloads with keys off and on, alternated run by run in one sitting.

    .venv/bin/python benchmarks/keys_cost.py [--workloads map,latency,submit] [--repeat 5] [--tasks 100000]

Each run is one fresh process of ../shared/bench/peer_bench.py (peer "scaler": SchedulerClusterCombo with 2
workers and a Client, as for every peer); keys are switched on by SCALER_KEYS, which both pick up, pointing at a
directory made by scaler_keygen for this sitting. The order alternates (off, on / on, off, ...) so that neither
side always runs second. Prints each side's median and the median of the paired ratios on/off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from scaler.security.keys import generate

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "bench", "peer_bench.py"))
METRIC = {"map": "tasks_per_s", "submit": "tasks_per_s", "latency": "median_us", "payload": "MB_per_s"}


def run(workload: str, tasks: int, keys: str | None) -> dict[str, object]:
    env = dict(os.environ)
    env.pop("SCALER_KEYS", None)
    if keys is not None:
        env["SCALER_KEYS"] = keys
    command = [sys.executable, BENCH, "scaler", workload, "--n", "2", "--tasks", str(tasks), "--quiet-wait", "20"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, check=False)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            result: dict[str, object] = json.loads(line)
            return result
    raise RuntimeError(f"{workload} with keys={keys is not None} printed no result:\n{done.stdout}\n{done.stderr}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="map,latency")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--out", default=None, help="append every run as a JSON line to this file")
    args = p.parse_args()
    keys = os.path.join(tempfile.mkdtemp(prefix="scaler-keys-cost-"), "keys")
    generate(keys)
    for workload in args.workloads.split(","):
        metric = METRIC[workload]
        values: dict[bool, list[float]] = {False: [], True: []}
        ratios = []
        for round_ in range(args.repeat):
            pair = {}
            for on in (False, True) if round_ % 2 == 0 else (True, False):
                result = run(workload, args.tasks, keys if on else None)
                result["keys"] = on
                value = float(str(result[metric]))
                values[on].append(value)
                pair[on] = value
                print(f"{workload:8} keys={'on ' if on else 'off'} {metric}={value:,.1f}", flush=True)
                if args.out:
                    with open(args.out, "a") as out:
                        out.write(json.dumps(result) + "\n")
            ratios.append(pair[True] / pair[False])
        median_off, median_on = statistics.median(values[False]), statistics.median(values[True])
        print(
            f"== {workload}: keys off {median_off:,.1f}, keys on {median_on:,.1f} {metric} (medians of {args.repeat}); "
            f"paired on/off ratios {', '.join(f'{r:.3f}' for r in ratios)}, median {statistics.median(ratios):.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
