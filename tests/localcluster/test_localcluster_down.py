"""`python -m localcluster down` returns only once every process it stopped is gone, so an `up`
straight after never meets a port or a file the old cluster still holds (issue 51).

The components are stood in for by a process that shuts down the way a large Go process
can: on SIGTERM its leader thread exits first, while another thread finishes the shutdown
with the port still bound. /proc/<pid>/exe (what `_runs` reads) is gone with the leader's
memory; the process, its port and its files are not until its last thread exits."""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster import cluster

SYS_EXIT = {"x86_64": 60, "aarch64": 93}
"""exit(2), which ends only the calling thread (exit_group(2) ends them all)."""
PYTHON = str(Path(sys.executable).resolve())
COMPONENT = r"""
import ctypes, os, signal, socket, sys, threading, time

port, shutdown_s, sys_exit = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
server = socket.socket()
server.bind(("127.0.0.1", port))
server.listen()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the threads started below too
stopping = threading.Event()


def finish_shutdown():
    stopping.wait()
    time.sleep(shutdown_s)  # the port is still bound meanwhile
    os._exit(0)


threading.Thread(target=finish_shutdown).start()
print("ready", flush=True)
signal.sigwait({signal.SIGTERM})
stopping.set()
ctypes.CDLL(None).syscall(sys_exit, 0)  # the leader thread alone exits
"""

pytestmark = pytest.mark.skipif(
    platform.machine() not in SYS_EXIT or not Path("/proc/self/task").is_dir(),
    reason="needs Linux's /proc and a known exit(2) number",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


LAUNCH = """
import subprocess, sys

log = open(sys.argv[1], "ab")
process = subprocess.Popen(sys.argv[2:], start_new_session=True, stdin=subprocess.DEVNULL,
                           stdout=log, stderr=log)
print(process.pid)
"""
"""Starts a stand-in and exits: like `make cluster-up`'s, its processes are not children of
the one that runs `down` (which therefore cannot reap them, and must not need to)."""


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Components:
    """The stand-ins this test started, each stopped by its id at the end if still there."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.detached: list[int] = []
        self.children: list[subprocess.Popen] = []

    def argv(self, port: int, shutdown_s: float) -> list[str]:
        sys_exit = str(SYS_EXIT[platform.machine()])
        return [PYTHON, "-c", COMPONENT, str(port), str(shutdown_s), sys_exit]

    def start_detached(self, name: str, port: int, shutdown_s: float) -> int:
        log = self.logs / f"{name}.log"
        launched = subprocess.run(
            [PYTHON, "-c", LAUNCH, str(log), *self.argv(port, shutdown_s)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        pid = int(launched.stdout)
        self.detached.append(pid)
        deadline = time.monotonic() + 60
        while not accepts(port):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        return pid

    def start(self, port: int) -> subprocess.Popen:
        process = subprocess.Popen(
            self.argv(port, 0), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.children.append(process)
        return process

    def stop_all(self) -> None:
        for pid in self.detached:
            if threads_left(pid):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while threads_left(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
        for process in self.children:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)


@pytest.fixture
def components(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    started = Components(logs)
    yield started
    started.stop_all()


def threads_left(pid: int) -> list[str]:
    """The states of `pid`'s threads that have not exited (Z: exited, not yet reaped)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rpartition(")")[2].split()[0])
        except OSError:
            continue
    return [s for s in states if s not in ("Z", "X")]


def started_cluster(tmp_path: Path, components: Components, shutdown_s: float):
    """A state folder as `up` leaves it, naming two running stand-ins; their ports."""
    state = cluster.State(tmp_path / "state")
    state.directory.mkdir()
    ports = {"etcd": free_port(), "kube-apiserver": free_port()}
    for name, port in ports.items():
        state.pids[name] = components.start_detached(name, port, shutdown_s)
        state.binaries[name] = PYTHON
    state.save()
    return state, ports


def up_again(components: Components, ports: dict[str, int]) -> None:
    """What `up` straight after does to those ports: start its components on them."""
    for name, port in ports.items():
        process = components.start(port)
        line = process.stdout.readline()
        assert line == "ready\n", f"{name} could not start: {process.stderr.read()[-300:]}"


def down_then_up(state: cluster.State, ports: dict[str, int], components: Components) -> float:
    """`down`, then at once what `up` does; how long `down` took. Once `down` returned no
    thread of a process it stopped is left, nor its state folder."""
    started = time.monotonic()
    cluster.down(state.directory)
    took = time.monotonic() - started
    for name, pid in state.pids.items():
        assert threads_left(pid) == [], f"{name} (pid {pid}) still runs after down returned"
    assert not state.directory.exists()
    up_again(components, ports)
    return took


def test_down_waits_for_a_process_whose_shutdown_outlives_its_leader(tmp_path, components):
    state, ports = started_cluster(tmp_path, components, shutdown_s=2)
    took = down_then_up(state, ports, components)
    assert 2 <= took < cluster.STOP_GRACE_S, took  # waited for the shutdown, no SIGKILL


def test_down_kills_a_process_that_does_not_stop_and_waits_for_it(
    tmp_path, components, monkeypatch
):
    # (raising=False: before issue 51 the grace was a literal 15 s; the test still fails there)
    monkeypatch.setattr(cluster, "STOP_GRACE_S", 1.0, raising=False)
    state, ports = started_cluster(tmp_path, components, shutdown_s=3600)
    took = down_then_up(state, ports, components)
    assert 1 <= took < 1 + cluster.KILL_WAIT_S, took
