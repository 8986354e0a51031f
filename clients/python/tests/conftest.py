"""Real three-node clusters from this repository's binary (``LEASEHOLD_BIN``, else
target/debug/leasehold), on loopback ports held for them, always reaped."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, TypeVar

import pytest

import leasehold

REPO = pathlib.Path(__file__).resolve().parents[3]
T = TypeVar("T")


def binary() -> str:
    path = os.environ.get("LEASEHOLD_BIN") or str(REPO / "target" / "debug" / "leasehold")
    if not os.path.exists(path):
        pytest.fail(f"no leasehold binary at {path}: run cargo build, or set LEASEHOLD_BIN")
    return path


def held_port() -> socket.socket:
    """A loopback port held for a node until the socket is closed, across the node's kills and
    restarts: bound without SO_REUSEADDR (which fails if any socket is bound there), then marked
    SO_REUSEADDR so that the node's own bind shares it; never listening, so a node that is down
    refuses connections. No port-0 bind, no bind without SO_REUSEADDR and no outgoing connection
    takes it meanwhile, which a port picked while free and released could lose: in CI a node
    refused to start ("Address already in use") and its cluster, one node short, lost its quorum
    at the first kill. Linux's rule (the BSDs would ask SO_REUSEPORT of the node's bind too); the
    Rust harness holds its ports the same way (``HeldPort`` in src/cli/local.rs)."""
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 0))
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    except OSError:
        held.close()
        raise
    return held


def wait_for(what: str, probe: Callable[[], Optional[T]], within: float = 20.0) -> T:
    """Polls ``probe`` until it returns something other than None (or raises nothing)."""
    deadline = time.monotonic() + within
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value is not None:
                return value
        except Exception as e:  # noqa: BLE001 - a probe fails while the cluster comes up
            last = e
        time.sleep(0.05)
    raise AssertionError(f"timed out after {within} s waiting for {what} (last: {last!r})")


class LocalCluster:
    def __init__(self, root: pathlib.Path, nodes: int = 3, manual_clock: bool = False, extra: Optional[List[str]] = None) -> None:
        self.root = root
        self.ids = list(range(1, nodes + 1))
        self.held = {(plane, i): held_port() for plane in ("client", "peer") for i in self.ids}
        self.client_ports = {i: self.held["client", i].getsockname()[1] for i in self.ids}
        self.peer_ports = {i: self.held["peer", i].getsockname()[1] for i in self.ids}
        self.manual_clock = manual_clock
        self.extra = extra or []
        self.procs: Dict[int, subprocess.Popen] = {}

    @property
    def endpoints(self) -> List[str]:
        return [f"127.0.0.1:{self.client_ports[i]}" for i in self.ids]

    def args(self, i: int) -> List[str]:
        peers = ",".join(f"{j}=127.0.0.1:{self.peer_ports[j]}" for j in self.ids)
        args = [
            binary(), "serve", "--id", str(i),
            "--listen", f"127.0.0.1:{self.client_ports[i]}",
            "--peer-listen", f"127.0.0.1:{self.peer_ports[i]}",
            "--data-dir", str(self.root / f"node-{i}"), "--peers", peers,
        ]
        return args + (["--manual-clock"] if self.manual_clock else []) + self.extra

    def start(self, i: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
        log = open(self.root / f"node-{i}.log", "ab")
        self.procs[i] = subprocess.Popen(self.args(i), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env)

    def kill(self, i: int) -> None:
        proc = self.procs.pop(i)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def leader(self, client: leasehold.Client, within: float = 20.0) -> int:
        def agreed() -> Optional[int]:
            leaders = {n.leader for n in client.status() if n.role != 5 and n.leader}
            return leaders.pop() if len(leaders) == 1 else None

        return wait_for("one leader", agreed, within)

    def stop(self) -> None:
        for i in list(self.procs):
            self.kill(i)
        for held in self.held.values():
            held.close()

    def logs(self) -> str:
        return "\n".join(
            f"---- node {i} ----\n" + (self.root / f"node-{i}.log").read_text(errors="replace")[-3000:]
            for i in self.ids if (self.root / f"node-{i}.log").exists()
        )


def started(tmp_path_factory: pytest.TempPathFactory, name: str, **options) -> LocalCluster:
    cluster = LocalCluster(tmp_path_factory.mktemp(name), **options)
    for i in cluster.ids:
        cluster.start(i)
    with leasehold.Client(cluster.endpoints) as client:
        try:
            cluster.leader(client)
            # Every node up, not only a quorum: a test that kills one needs the other two.
            wait_for("every node to follow the leader", lambda: all(n.role in (1, 2) for n in client.status()) or None)
        except AssertionError:
            cluster.stop()
            raise AssertionError(f"the cluster did not come up:\n{cluster.logs()}")
    return cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A cluster shared by a module's tests that leave every node up."""
    c = started(tmp_path_factory, "cluster")
    yield c
    c.stop()


@pytest.fixture
def fresh_cluster(tmp_path_factory):
    """A cluster of the test's own, for tests that kill nodes."""
    c = started(tmp_path_factory, "fresh")
    yield c
    c.stop()


@pytest.fixture(scope="module")
def manual_cluster(tmp_path_factory):
    """A cluster whose store time moves only when a test advances it."""
    c = started(tmp_path_factory, "manual", manual_clock=True)
    yield c
    c.stop()


@pytest.fixture
def client(cluster):
    with leasehold.Client(cluster.endpoints) as c:
        yield c


def holder_process(endpoints: List[str], lease: str, ttl: float, *extra: str) -> subprocess.Popen:
    """tests/holder_process.py in a process of its own, holding ``lease``."""
    script = pathlib.Path(__file__).with_name("holder_process.py")
    return subprocess.Popen(
        [sys.executable, str(script), ",".join(endpoints), lease, str(ttl), *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
    )
