"""What the side-by-side benchmarks that run each engine in a fresh process share (benchmarks/nested.py,
benchmarks/big_graph.py): where each peer's interpreter is, running one script in a session of its own under a time
limit, writing one JSON line per run, and the random graph of big_graph.py and responsiveness.py."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Hashable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS_DIR = os.environ.get("PEERS_DIR", "/tmp/peers")
PYTHON = {
    "ours": sys.executable,
    "scaler19": os.path.join(PEERS_DIR, "scaler19", "bin", "python"),
    "dask": os.path.join(PEERS_DIR, "dask", "bin", "python"),
    "ray": os.path.join(PEERS_DIR, "ray", "bin", "python"),
}


# A random DAG: two literals, then `nodes` tasks add(a, b), a and b two distinct nodes drawn from the `window` nodes
# before (seeded). Returns the graph, its sinks (the nodes nothing uses) and their values. As source text, because
# big_graph.py runs it inside each peer's own interpreter; make_graph below is the same code, for this one.
GRAPH_SOURCE = """
import random
from operator import add

def make_graph(nodes, window=1000, seed=0):
    rng = random.Random(seed)
    graph = {"d0": 1, "d1": 2}
    values = {"d0": 1, "d1": 2}
    keys = []
    for i in range(nodes):
        recent = keys[-window:]
        a, b = rng.sample(recent, 2) if len(recent) >= 2 else [*recent, "d0", "d1"][:2]
        key = f"n{i}"
        graph[key] = (add, a, b)
        values[key] = values[a] + values[b]
        keys.append(key)
    used = set()
    for key in keys:
        used.update(graph[key][1:])
    sinks = [key for key in keys if key not in used]
    return graph, sinks, [values[key] for key in sinks]
"""
_graph_namespace: dict[str, Any] = {}
exec(GRAPH_SOURCE, _graph_namespace)
# (the graph in the key types Client.submit_graph takes)
make_graph: Callable[..., tuple[dict[Hashable, Any], list[Hashable], list[int]]] = _graph_namespace["make_graph"]


def check_peers(parser: argparse.ArgumentParser, peers: list[str], scripts: dict[str, str]) -> None:
    """Exit with a usage error for an unknown peer or one whose venv is missing."""
    for peer in peers:
        if peer not in scripts:
            parser.error(f"unknown peer {peer!r} (one of {', '.join(scripts)})")
        if not os.path.exists(PYTHON[peer]):
            parser.error(f"{PYTHON[peer]} is missing: PEERS_DIR={PEERS_DIR} bash ../shared/bench/setup_venvs.sh")


def run_script(
    peer: str, script: str, args: list[str], limit: float, src: str | None = None
) -> tuple[dict[str, Any] | None, str]:
    """Run `script` with the peer's interpreter (ours: `src`, by default this checkout's src, first on the path) in a
    session of its own, killed with everything it started after `limit` seconds. Returns (the first JSON object it
    printed, "") or (None, why there is none)."""
    env = dict(os.environ)
    if peer == "ours":
        env["PYTHONPATH"] = os.pathsep.join([src or os.path.join(ROOT, "src"), env.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [PYTHON[peer], "-c", script, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.communicate()
        return None, f"did not finish within {limit:g}s"
    finally:
        try:
            os.killpg(process.pid, 9)  # whatever it left behind
        except ProcessLookupError:
            pass
    results = [json.loads(x) for x in out.decode().splitlines() if x.startswith("{")]
    if not results:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return None, f"exit {process.returncode}: {tail[0][:200]}"
    return results[0], ""


def emit(line: dict[str, Any], out: str | None) -> None:
    """Print one run's JSON line, and append it to `out` when given."""
    print(json.dumps(line), flush=True)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(line) + "\n")
