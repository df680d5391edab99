"""Big results and a big shared argument, Scaler beside Ray and joblib/loky (issue 29's figures).

results  --tasks tasks (default 100) each return --mb MB (default 10) of bytes to the caller: MB/s of results
         received, from the first submit to the last value in hand.
array    one --array-mb MB (default 128) numpy array given to --calls calls (default 16) that each sum it: seconds
         from the first call to the last value. Scaler runs it twice: the array as each call's argument (shared memory
         on one host), and sent once with send_object and passed by reference.

Each peer runs in its own interpreter (one venv each: ../shared/bench/setup_venvs.sh makes `ray` and `pool`):

    .venv/bin/python benchmarks/big_data.py scaler results          # this project's Scaler
    /tmp/peers/ray/bin/python benchmarks/big_data.py ray results
    /tmp/peers/pool/bin/python benchmarks/big_data.py joblib array  # joblib's loky backend (memmapping)

--n workers (default 2). --repeat runs (default 3): prints each run and the median, as one JSON line at the end.
Compare ratios within one sitting: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def make_bytes(megabytes: int) -> bytes:
    return os.urandom(1 << 20) * megabytes  # (random blocks, repeated: cheap to make, not compressible per MB)


def total(array: Any) -> float:
    return float(array.sum())


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


class Scaler:
    def __init__(self, n: int) -> None:
        from scaler import Client, SchedulerClusterCombo

        self.combo = SchedulerClusterCombo(address=free_address(), n_workers=n, logging_level="WARNING")
        self.client = Client(self.combo.address)

    def results(self, tasks: int, megabytes: int) -> None:
        futures = [self.client.submit(make_bytes, megabytes) for _ in range(tasks)]
        for future in futures:
            assert len(future.result()) == megabytes << 20

    def array(self, array: Any, calls: int, shared: bool) -> None:
        argument = self.client.send_object(array) if shared else array
        futures = [self.client.submit(total, argument) for _ in range(calls)]
        for future in futures:
            future.result()

    def close(self) -> None:
        self.client.disconnect()
        self.combo.shutdown()


class Ray:
    def __init__(self, n: int) -> None:
        import ray  # type: ignore[import-not-found]  # (in its own venv)

        ray.init(num_cpus=n, include_dashboard=False, logging_level="ERROR")
        self.ray = ray
        self.make = ray.remote(make_bytes)
        self.total = ray.remote(total)

    def results(self, tasks: int, megabytes: int) -> None:
        for value in self.ray.get([self.make.remote(megabytes) for _ in range(tasks)]):
            assert len(value) == megabytes << 20

    def array(self, array: Any, calls: int, shared: bool) -> None:
        ref = self.ray.put(array)  # (Ray's way either way: one object, read in place by each call)
        self.ray.get([self.total.remote(ref) for _ in range(calls)])

    def close(self) -> None:
        self.ray.shutdown()


class Joblib:
    def __init__(self, n: int) -> None:
        import joblib

        self.joblib = joblib
        self.n = n

    def results(self, tasks: int, megabytes: int) -> None:
        parallel = self.joblib.Parallel(n_jobs=self.n, backend="loky")
        for value in parallel(self.joblib.delayed(make_bytes)(megabytes) for _ in range(tasks)):
            assert len(value) == megabytes << 20

    def array(self, array: Any, calls: int, shared: bool) -> None:
        parallel = self.joblib.Parallel(n_jobs=self.n, backend="loky")  # (big arrays memmapped: max_nbytes=1M)
        parallel(self.joblib.delayed(total)(array) for _ in range(calls))

    def close(self) -> None:
        pass


PEERS: dict[str, Callable[[int], Any]] = {"scaler": Scaler, "ray": Ray, "joblib": Joblib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("workload", choices=["results", "array"])
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--array-mb", type=int, default=128)
    parser.add_argument("--calls", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    peer = PEERS[args.peer](args.n)
    try:
        runs: dict[str, list[float]] = {}
        if args.workload == "results":
            peer.results(2, 1)  # warm-up: workers up, functions sent
            for _ in range(args.repeat):
                start = time.perf_counter()
                peer.results(args.tasks, args.mb)
                runs.setdefault("MB/s", []).append(args.tasks * args.mb / (time.perf_counter() - start))
        else:
            import numpy

            array = numpy.random.default_rng(0).random(args.array_mb << 17)  # 8-byte floats
            peer.array(numpy.ones(4), 2, False)  # warm-up
            for _ in range(args.repeat):
                for shared in (False, True) if args.peer == "scaler" else (False,):
                    start = time.perf_counter()
                    peer.array(array, args.calls, shared)
                    name = "s (send_object once)" if shared else "s"
                    runs.setdefault(name, []).append(time.perf_counter() - start)
        for name, values in runs.items():
            print(f"{args.peer} {args.workload}: {name} " + " ".join(f"{v:.2f}" for v in values), file=sys.stderr)
        print(
            json.dumps(
                {
                    "peer": args.peer,
                    "workload": args.workload,
                    "n": args.n,
                    **{name: round(statistics.median(values), 3) for name, values in runs.items()},
                }
            )
        )
    finally:
        peer.close()


if __name__ == "__main__":
    main()
