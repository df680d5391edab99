"""Scaler across several hosts on this machine: the scheduler and two worker hosts each in a network namespace of
their own, the test process as the client host, joined by veth pairs (each host its own address, no loopback between
them). All of them use keys, as a scheduler listening on a network address should (docs/security.md). Work runs
across the hosts, and across a link to one worker host cut (its end on the scheduler's host set down) and restored.

Needs root and `ip netns` (iproute2); skipped with the reason otherwise. The fixture deletes the namespaces and links
it made, and stops the processes it started (by pid), whatever happens.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from scaler import Client
from scaler.monitor.top import Subscription
from scaler.security.keys import generate
from tests.helpers import kill_tree, wait_until

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PORT = 8516  # the scheduler's namespace is new: nothing else listens there
HEARTBEAT = "0.5"
WORKER_TIMEOUT = "2"
TIMEOUT = 30.0  # the bound on each wait; generous for a loaded 2-core machine
WORKER_HOSTS = ("hosta", "hostb")


# ----------------------------------------------------------------------------------------------- tasks
def net_namespace() -> int:
    """The inode of the network namespace this process runs in: which host it is on."""
    return os.stat("/proc/self/ns/net").st_ino


def square_where(value: int, seconds: float = 0.0) -> tuple[int, int]:
    """The square of `value` after `seconds`, and where it was computed."""
    time.sleep(seconds)
    return value * value, net_namespace()


def mark_square_where(markers: str, value: int, seconds: float) -> tuple[int, int]:
    """Leave a file <value>.<namespace inode>.<unique> (the task started there), sleep, then answer."""
    Path(markers, f"{value}.{net_namespace()}.{time.monotonic_ns()}").touch()
    return square_where(value, seconds)


# ----------------------------------------------------------------------------------------------- the hosts
def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"scaler-probe-{os.getpid()}-{secrets.token_hex(3)}"
    made = ip("netns", "add", probe)
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here: {made.stderr.strip() or made.returncode}"
    ip("netns", "del", probe)
    return None


def free_subnets(count: int) -> list[int]:
    """Third octets of 10.77.x.0/24 subnets that this machine's own namespace uses nowhere (only the client link's
    subnet lives there; the others are in namespaces of their own, but are kept apart from it all the same)."""
    used = ip("-4", "addr").stdout + ip("-4", "route").stdout
    start = os.getpid() % 200
    octets = [x % 250 + 1 for x in range(start, start + 250)]
    free = [x for x in octets if f"10.77.{x}." not in used]
    if len(free) < count:
        pytest.skip("no free 10.77.x.0/24 subnets on this machine")
    return free[:count]


@dataclass
class Hosts:
    """The namespaces, links and processes of one test. `address` is the scheduler's; `links` maps a worker host to
    the scheduler's end of its link (the end the test cuts)."""

    tag: str
    scratch: Path
    address: str = ""
    monitor_address: str = ""
    namespaces: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    host_addresses: dict[str, str] = field(default_factory=dict)
    root_links: list[str] = field(default_factory=list)
    popens: list[subprocess.Popen[bytes]] = field(default_factory=list)
    clients: list[Client] = field(default_factory=list)
    feed: Subscription | None = None

    @property
    def keys(self) -> Path:
        return self.scratch / "keys"

    def make(self, x_client: int, x_workers: list[int]) -> None:
        generate(self.keys)
        scheduler_ns = self.namespace("sched")
        client_end, scheduler_end = f"sc{self.tag}c", f"sc{self.tag}s"
        self.run("link", "add", client_end, "type", "veth", "peer", "name", scheduler_end, "netns", scheduler_ns)
        self.root_links.append(client_end)
        self.run("addr", "add", f"10.77.{x_client}.1/24", "dev", client_end)
        self.run("link", "set", client_end, "up")
        self.run("-n", scheduler_ns, "addr", "add", f"10.77.{x_client}.2/24", "dev", scheduler_end)
        self.run("-n", scheduler_ns, "link", "set", scheduler_end, "up")
        self.run("-n", scheduler_ns, "link", "set", "lo", "up")
        self.host_addresses["client"] = f"10.77.{x_client}.1"
        self.host_addresses["sched"] = f"10.77.{x_client}.2"
        self.address = f"tcp://10.77.{x_client}.2:{PORT}"
        for index, (host, x) in enumerate(zip(WORKER_HOSTS, x_workers)):
            ns = self.namespace(host)
            worker_end, scheduler_end = f"sc{self.tag}w{index}", f"sc{self.tag}v{index}"
            self.run("-n", ns, "link", "add", worker_end, "type", "veth", "peer", "name", scheduler_end)
            self.run("-n", ns, "link", "set", scheduler_end, "netns", scheduler_ns)
            self.run("-n", ns, "addr", "add", f"10.77.{x}.2/24", "dev", worker_end)
            self.run("-n", ns, "link", "set", worker_end, "up")
            self.run("-n", ns, "link", "set", "lo", "up")
            self.run("-n", ns, "route", "add", "default", "via", f"10.77.{x}.1")
            self.run("-n", scheduler_ns, "addr", "add", f"10.77.{x}.1/24", "dev", scheduler_end)
            self.run("-n", scheduler_ns, "link", "set", scheduler_end, "up")
            self.links[host] = scheduler_end
            self.host_addresses[host] = f"10.77.{x}.2"
        self.monitor_address = f"ipc://{self.scratch}/monitor"  # a path: reachable from every namespace

    def namespace(self, host: str) -> str:
        name = f"scaler-{self.tag}-{host}"
        self.run("netns", "add", name)
        self.namespaces[host] = name
        return name

    def run(self, *args: str) -> None:
        done = ip(*args)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def inode(self, host: str) -> int:
        return os.stat(f"/run/netns/{self.namespaces[host]}").st_ino

    def spawn(self, host: str, *args: str) -> subprocess.Popen[bytes]:
        """`args` run on `host` (`ip netns exec` execs them: the pid is theirs)."""
        log = open(self.scratch / "processes.log", "ab")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        with log:
            popen = subprocess.Popen(
                ["ip", "netns", "exec", self.namespaces[host], *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.scratch,
            )
        self.popens.append(popen)
        return popen

    def start_scheduler(self) -> None:
        self.spawn(
            "sched",
            *(str(BIN / "scaler_scheduler"), self.address, "--keys", str(self.keys)),
            *("--monitor-address", self.monitor_address),
            *("--worker-timeout-seconds", WORKER_TIMEOUT, "--logging-level", "WARNING"),
        )

    def start_workers(self, host: str, n: int = 2) -> None:
        self.spawn(
            host,
            *(str(BIN / "scaler_cluster"), self.address, "--keys", str(self.keys), "-n", str(n)),
            *("--worker-name-prefix", host),
            *("--heartbeat-interval-seconds", HEARTBEAT, "--logging-level", "WARNING"),
        )

    def client(self) -> Client:
        client = Client(self.address, timeout_seconds=30, keys=self.keys)
        self.clients.append(client)
        return client

    def workers(self) -> Counter[str]:
        """Connected workers per host, from the newest status the scheduler published."""
        if self.feed is None:
            self.feed = Subscription(self.monitor_address, None)
        newest = None
        while (status := self.feed.next(0)) is not None:
            newest = status
        newest = newest or self.feed.next(1500)
        return Counter() if newest is None else Counter(w.name.split("-")[0] for w in newest.workers)

    def wait_workers(self, expected: dict[str, int], what: str) -> float:
        start = time.monotonic()

        def ready() -> bool:
            for popen in self.popens:
                if popen.poll() is not None:
                    log = (self.scratch / "processes.log").read_text()[-2000:]
                    raise AssertionError(f"{popen.args!r} exited with code {popen.returncode}:\n{log}")
            return self.workers() == Counter(expected)

        wait_until(ready, timeout=TIMEOUT, interval=0.1, what=what)
        return time.monotonic() - start

    def stop(self) -> None:
        for client in self.clients:
            try:
                client.disconnect()
            except Exception:  # a client of an unreachable scheduler may raise; nothing more to do
                pass
        if self.feed is not None:
            self.feed.close()
        ours = []
        for popen in self.popens:
            try:
                ours += [psutil.Process(popen.pid), *psutil.Process(popen.pid).children(recursive=True)]
            except psutil.Error:
                pass
        for popen in reversed(self.popens):  # the clusters first, so the scheduler hears its workers leave
            if popen.poll() is None:
                popen.terminate()
        for popen in reversed(self.popens):
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(5)
        kill_tree([p for p in ours if p.is_running()])

    def remove(self) -> None:
        """Delete what this test made: the links in this namespace (both ends go), then the namespaces (with the
        links inside them)."""
        for link in self.root_links:
            ip("link", "del", link)
        for name in self.namespaces.values():
            ip("netns", "del", name)


@pytest.fixture()
def hosts() -> Iterator[Hosts]:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tag = f"{os.getpid() % 100000:05d}{secrets.token_hex(1)}"  # veth names: at most 15 bytes
    scratch = Path(tempfile.mkdtemp(prefix="scaler-hosts-", dir="/tmp"))  # short: the monitor's ipc path
    made = Hosts(tag, scratch)
    try:
        with open("/tmp/scaler-several-hosts.lock", "w") as lock:  # parallel runs: one picks its subnets at a time
            fcntl.flock(lock, fcntl.LOCK_EX)
            x_client, *x_workers = free_subnets(1 + len(WORKER_HOSTS))
            made.make(x_client, x_workers)
        yield made
    finally:
        try:
            made.stop()
        finally:
            made.remove()
            shutil.rmtree(scratch, ignore_errors=True)
    leftovers = [name for name in made.namespaces.values() if Path("/run/netns", name).exists()]
    assert not leftovers, f"namespaces left behind: {leftovers}"


def start_all(hosts: Hosts) -> None:
    hosts.start_scheduler()
    for host in WORKER_HOSTS:
        hosts.start_workers(host)
    hosts.wait_workers({host: 2 for host in WORKER_HOSTS}, "2 workers on each worker host")


def started_on(markers: Path) -> Counter[int]:
    """Tasks started per namespace inode."""
    return Counter(int(p.name.split(".")[1]) for p in markers.iterdir())


def runs_by_task(markers: Path) -> dict[int, list[int]]:
    """The namespace inode of each start of each task, in no particular order."""
    starts: dict[int, list[int]] = {}
    for p in markers.iterdir():
        value, inode, _ = p.name.split(".")
        starts.setdefault(int(value), []).append(int(inode))
    return starts


def scheduler_peers(hosts: Hosts) -> set[str]:
    """The addresses connected to the scheduler, as its own namespace sees them (/proc/PID/net/tcp of the scheduler:
    addresses in hex, in this machine's byte order)."""
    table = Path(f"/proc/{hosts.popens[0].pid}/net/tcp").read_text().splitlines()[1:]
    peers = set()
    for row in table:
        local, remote, state = row.split()[1:4]
        if state == "01" and int(local.split(":")[1], 16) == PORT:  # 01: established
            peers.add(socket.inet_ntoa(struct.pack("=I", int(remote.split(":")[0], 16))))
    return peers


def scheduler_connections(hosts: Hosts) -> list[tuple[str, str]]:
    """(local, remote) addresses of this process's tcp connections to the scheduler's port."""
    return [
        (c.laddr.ip, c.raddr.ip)
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == PORT and c.status == psutil.CONN_ESTABLISHED
    ]


# ----------------------------------------------------------------------------------------------- tests
def test_a_map_runs_across_two_worker_hosts(hosts: Hosts) -> None:
    """The client, the scheduler and the two worker hosts each have an address of their own, and every connection
    crosses a veth link; a map's tasks all come back right, computed on both worker hosts."""
    start_all(hosts)
    assert len(set(hosts.host_addresses.values())) == 4, hosts.host_addresses
    assert net_namespace() not in {hosts.inode(host) for host in hosts.namespaces}, "the client is a host of its own"
    client = hosts.client()
    assert client.submit(square_where, 2).result(timeout=TIMEOUT)[0] == 4
    assert scheduler_connections(hosts) == [(hosts.host_addresses["client"], hosts.host_addresses["sched"])]
    assert scheduler_peers(hosts) == {hosts.host_addresses[host] for host in ("client", *WORKER_HOSTS)}

    results = client.map(square_where, [(i, 0.01) for i in range(300)], timeout=TIMEOUT)

    assert [value for value, _ in results] == [i * i for i in range(300)]
    ran = Counter(where for _, where in results)
    by_host = {host: ran[hosts.inode(host)] for host in WORKER_HOSTS}
    print(f"\ntasks per worker host: {by_host}")
    assert sum(by_host.values()) == 300, f"tasks ran outside the worker hosts: {ran}"
    assert all(by_host.values()), f"a worker host ran nothing: {by_host}"


def test_a_cut_link_loses_no_tasks_and_the_host_comes_back(hosts: Hosts) -> None:
    """The link to one worker host is cut while tasks run there: the scheduler declares its workers lost after the
    worker timeout and runs their tasks on the other host; nothing is lost. Once the link is back, the cut host's
    workers (which gave up their session after the same silence) say hello again and take tasks."""
    start_all(hosts)
    client = hosts.client()
    markers = hosts.scratch / "runs"
    markers.mkdir()
    cut_host, other_host = WORKER_HOSTS
    cut_inode = hosts.inode(cut_host)
    futures = [client.submit(mark_square_where, str(markers), i, 0.05) for i in range(200)]
    wait_until(lambda: started_on(markers)[cut_inode] >= 5, timeout=TIMEOUT, what=f"tasks started on {cut_host}")

    cut_at = time.monotonic()
    hosts.run("-n", hosts.namespaces["sched"], "link", "set", hosts.links[cut_host], "down")
    try:
        lost = hosts.wait_workers({other_host: 2}, f"the scheduler to declare {cut_host}'s workers lost")
    finally:
        hosts.run("-n", hosts.namespaces["sched"], "link", "set", hosts.links[cut_host], "up")
    restored_at = time.monotonic()
    back = hosts.wait_workers({host: 2 for host in WORKER_HOSTS}, f"{cut_host}'s workers to reconnect")
    print(
        f"\n{cut_host} declared lost {lost:.1f}s after the cut; link restored {restored_at - cut_at:.1f}s after the "
        f"cut; {cut_host}'s workers back {back:.1f}s after the restore"
    )

    results = [future.result(timeout=TIMEOUT) for future in futures]
    assert [value for value, _ in results] == [i * i for i in range(200)]
    starts = runs_by_task(markers)
    moved = [i for i, where in enumerate(results) if cut_inode in starts[i] and where[1] != cut_inode]
    twice = sum(1 for inodes in starts.values() if len(inodes) > 1)
    print(f"tasks started on {cut_host} but answered by {other_host}: {len(moved)}; tasks started twice: {twice}")
    assert moved, f"no task of {cut_host} ran elsewhere: the cut came too late to matter"

    again = client.map(square_where, [(i, 0.01) for i in range(300)], timeout=TIMEOUT)
    assert [value for value, _ in again] == [i * i for i in range(300)]
    took = Counter(where for _, where in again)
    assert took[cut_inode] > 0, f"{cut_host} took no tasks after its link was restored: {took}"
    print(f"after the restore: {cut_host} ran {took[cut_inode]} of 300 tasks")
