"""Screenshots of scaler_ui's dashboard under load, for docs/images: a real local cluster running a mixed workload
(several functions, some failing, some printing), or with --fake the fake scheduler of the tests.

    python -m tests.e2e.dashboard_screenshots docs/images            # a real cluster (a few minutes)
    python -m tests.e2e.dashboard_screenshots --fake docs/images     # synthetic statuses
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from scaler import Client, SchedulerClusterCombo
from tests.e2e.dashboard_browser import Page, browser
from tests.e2e.dashboard_fake import FakeScheduler
from tests.e2e.test_ui import dashboard_page, start_ui
from tests.helpers import free_address

VIEWS = ("overview", "stream", "workers", "tasks", "output")


def load_chunk(i: int) -> int:
    time.sleep(random.uniform(0.2, 0.8))
    if i % 4 == 0:
        print(f"load_chunk: chunk {i} has {random.randrange(1000, 99999)} rows")
    return i


def fit_model(i: int) -> float:
    deadline = time.monotonic() + random.uniform(0.5, 1.5)
    total = 0.0
    while time.monotonic() < deadline:
        total += sum(x * x for x in range(2000))
    if i % 17 == 0:
        raise ValueError(f"model {i} did not converge")
    return total


def score(i: int) -> int:
    time.sleep(random.uniform(0.05, 0.2))
    return i * 2


def simulate_path(i: int) -> float:
    time.sleep(random.uniform(0.3, 1.2))
    if i % 11 == 0:
        raise RuntimeError(f"path {i} left the grid")
    return random.random()


def workload(address: str, stop: threading.Event) -> None:
    """Waves of tasks of four functions until `stop`; load_chunk's output is streamed."""
    with Client(address=address, timeout_seconds=60, stream_output=True, profiling=True) as client:
        wave = 0
        while not stop.is_set():
            futures = []
            for function, count in ((load_chunk, 24), (fit_model, 10), (score, 30), (simulate_path, 16)):
                futures += [client.submit(function, wave * 100 + i) for i in range(count)]
            for future in futures:
                future.exception(timeout=120)
            wave += 1


def capture(url: str, out: Path, settle: Callable[[Page], None] | None = None) -> list[Path]:
    shots = []
    with browser() as chromium:
        page = dashboard_page(chromium, url, 1440, 900)
        for view in VIEWS:
            p = page.open(view)
            time.sleep(3)
            if view == "workers":
                p.click("#workers tbody tr:nth-child(2)")
                time.sleep(2.5)
            if view == "tasks" and p.locator("#failures tr[data-task]").count():
                p.locator("#failures tr[data-task]").first.click()
                time.sleep(1.5)
            name = "dashboard.png" if view == "overview" else f"dashboard-{view}.png"
            p.screenshot(path=str(out / name))
            shots.append(out / name)
        assert page.outside_requests() == [] and page.errors == [], (page.outside_requests(), page.errors)
    return shots


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--fake", action="store_true", help="synthetic statuses instead of a real cluster")
    p.add_argument("--seconds", type=float, default=150, help="how long the load runs before the screenshots")
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.fake:
        folder = tempfile.mkdtemp(prefix="scaler_ui_")
        with FakeScheduler(f"ipc://{folder}/monitor", 1.0, n_workers=24, processors=4) as fake:
            ui, url = start_ui(fake.address)
            try:
                time.sleep(args.seconds)
                print(*capture(url, args.out), sep="\n")
            finally:
                ui.kill()
        return
    with SchedulerClusterCombo(address=free_address(), n_workers=args.workers, logging_level="WARNING") as combo:
        ui, url = start_ui(combo.monitor_address)
        time.sleep(3)  # the scheduler records task events once it has seen scaler_ui subscribe
        stop = threading.Event()
        load = threading.Thread(target=workload, args=(combo.address, stop), daemon=True)
        try:
            load.start()
            time.sleep(args.seconds)
            print(*capture(url, args.out), sep="\n")
        finally:
            stop.set()
            load.join(120)
            ui.kill()


if __name__ == "__main__":
    main()
