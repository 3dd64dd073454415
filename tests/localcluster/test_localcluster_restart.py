"""`up` on a cluster one of whose processes died restarts that one alone, as it was first
started (issue 47, scenario 6); `restart` stops a process only while its recorded id still
names the process `up` started.

The components are stood in for by small Python servers, each on its own port, started with
localcluster's own `_spawn` (so recorded as `up` records them); the Go-built cluster's
version of this runs in tests/e2e/test_e2e_cluster_up_after_crash.py."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster import cluster

PYTHON = str(Path(sys.executable).resolve())
SERVER = r"""
import os, socket, sys
server = socket.socket()
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
print("started with MARK=" + os.environ.get("MARK", ""), flush=True)
while True:
    server.accept()[0].close()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A state folder as `up` leaves it: two stand-ins started, each on its port, with its
    READY check; at the end every process any of these tests started is gone."""
    monkeypatch.setattr(cluster, "_install", lambda state, stack_dir: None)
    monkeypatch.setattr(cluster, "_destroy", lambda state: None)
    spawned: list[tuple[int, str | None]] = []
    spawn = cluster._spawn

    def recording(state, name, *args):
        since = spawn(state, name, *args)
        spawned.append((state.pids[name], state.started[name]))
        return since

    monkeypatch.setattr(cluster, "_spawn", recording)
    made = cluster.State(tmp_path / "state")
    made.logs.mkdir(parents=True)
    for name in ("first", "second"):
        made.ports[name] = free_port()
        argv = [sys.executable, "-c", SERVER, str(made.ports[name])]
        cluster._spawn(made, name, PYTHON, argv, {"MARK": f"{name}-env"}, "tcp")
        cluster._wait_ready(made, name, 0)
    made.all_started = True
    made.save()
    yield made
    for pid, started in spawned:
        cluster._signal(pid, started, signal.SIGKILL)
        cluster._wait_gone({pid: started}, 10)
        cluster._reap(pid)


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_up_restarts_only_the_dead_process_as_it_was_started(state):
    before = dict(state.pids)
    killed = cluster.kill(state, "second")
    assert killed == before["second"] and not accepts(state.ports["second"])

    again = cluster.up(state.directory)

    assert again.pids["first"] == before["first"], "a running process was restarted"
    assert again.pids["second"] != before["second"], "the dead process was not restarted"
    assert cluster._alive(again, "first") and cluster._alive(again, "second")
    assert accepts(again.ports["second"]), "not on its recorded port"
    assert again.ports == state.ports
    log = (state.logs / "second.log").read_text().splitlines()
    assert log == ["started with MARK=second-env"] * 2, log  # its env again, its log appended
    assert cluster.State.load(state.directory).pids == again.pids  # recorded for `down`


def test_down_stops_a_restarted_process(state):
    cluster.restart(state, "first")
    restarted = (state.pids["first"], state.started["first"])
    cluster.down(state.directory)
    assert not cluster._holds_on(*restarted)
    assert not state.directory.exists()


def test_restart_leaves_a_process_that_reuses_the_recorded_id_alone(state):
    """The recorded process died and the kernel gave its id to another process running the
    same binary (the same Python here): `_runs` alone takes it for ours; its start time
    tells it apart, and restart starts ours without signalling it."""
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL
    )
    try:
        cluster.kill(state, "second")
        recorded = state.started["second"]
        state.pids["second"] = stranger.pid  # what the state file says after the id's reuse
        state.started["second"] = recorded
        state.save()
        assert cluster._runs(stranger.pid, PYTHON)

        cluster.restart(state, "second")

        assert stranger.poll() is None, "restart signalled a process it did not start"
        assert state.pids["second"] != stranger.pid
        assert accepts(state.ports["second"])
    finally:
        stranger.kill()
        stranger.wait(timeout=30)


def test_restart_of_an_unknown_name_says_which_exist(state):
    with pytest.raises(SystemExit, match=r"restart etcd: no such process \(known: first, second\)"):
        cluster.restart(state, "etcd")


def test_restart_reads_the_state_file_first(state):
    """Another `up` restarted `second` since this state was read: restart stops the process
    the file names (not the stale id, gone already) and the old object learns the new id."""
    stale = cluster.State.load(state.directory)
    cluster.kill(state, "second")
    cluster.up(state.directory)
    current = cluster.State.load(state.directory)

    cluster.restart(stale, "second")

    assert not cluster._holds_on(current.pids["second"], current.started["second"]), (
        "the process the file named still runs beside the restarted one"
    )
    assert stale.pids["second"] != current.pids["second"]
    assert cluster._alive(stale, "second") and accepts(stale.ports["second"])
