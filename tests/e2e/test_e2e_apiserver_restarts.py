"""Issue 47, scenario 2 against the real control plane: the kube-apiserver, then etcd,
SIGKILLed (`localcluster.cluster.kill`) and started again with the arguments it was started
with (`cluster.restart`) while three followers follow: `trainstack launch --wait` and
`trainstack logs -f` of one TrainJob, and the Training API's log follow (`trainstack serve`
as deployed, test_e2e_serve.py) of a run it submitted. `trainstack status` is asked while the
component is down. Lines are appended to the file kwok serves as every pod's log before,
during and after the outage; then the runs' pods end with exit code 0.

Each follower must end on its own with the run's final state, show every line written once
and in order (or one line saying where lines may be missing: none is expected here, the
containers outlive the outage), and report each state change once; `status` answers, or ends
with one line and a non-zero exit. One `e2e-figure:` line per restart (pytest -s shows it):
down_s (kill to the component ready again), next_line_s per log follower (kill to the first
line written during the outage shown), final_s (the pods' end to `--wait`'s final state),
and the duplicated and dropped lines and state changes (each should be 0).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localcluster import cluster
from tests.e2e.conftest import eventually, pods_of, remove_run
from tests.e2e.test_e2e_serve import TOKEN, USER, api_account, deployed_api

__all__ = ["api_account"]
WHERE = ("stack=local", "backend=kubernetes")
ONE_NODE = ("compute=p5.48xlarge", "compute.nodes=1")
GAP = "may be missing lines"
STATUS_WAIT_S = 10.0
"""How long the component stays down at most for `status` to answer (etcd down: it waits)."""


class Follower:
    """One follower's output as it came: (seconds on the monotonic clock, line)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[tuple[float, str]] = []
        self.thread: threading.Thread | None = None
        self.process: subprocess.Popen | None = None
        self.error: BaseException | None = None

    @classmethod
    def command(cls, name: str, process: subprocess.Popen) -> Follower:
        follower = cls(name)
        follower.process = process

        def read() -> None:
            for line in process.stdout:
                follower.seen.append((time.monotonic(), line.rstrip("\n")))

        follower._start(read)
        return follower

    @classmethod
    def api(cls, url: str, ca: Path, run_id: str) -> Follower:
        follower = cls("api follow")
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def read() -> None:
            try:
                with (
                    httpx.Client(base_url=url, verify=str(ca), headers=headers, timeout=300) as c,
                    c.stream("GET", f"/v1/runs/{run_id}/logs?follow=true") as response,
                ):
                    assert response.status_code == 200, response.read()
                    for line in response.iter_lines():
                        follower.seen.append((time.monotonic(), line))
            except BaseException as exc:  # the test reports it
                follower.error = exc

        follower._start(read)
        return follower

    def _start(self, read) -> None:
        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()

    @property
    def lines(self) -> list[str]:
        return [line for _, line in self.seen]

    def shown(self, marker: str) -> float | None:
        """When the line `marker` was first shown (None: not yet)."""
        return next((at for at, line in self.seen if line.endswith(marker)), None)

    def end(self, timeout_s: float = 120) -> int | None:
        """Wait for the follower to end by itself; its exit code (None for the API's)."""
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"{self.name} did not end: {self.lines[-20:]}"
        assert self.error is None, f"{self.name}: {self.error!r}"
        return None if self.process is None else self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()  # by its pid: a follower the test started
            self.process.wait(timeout=30)


class PodLog:
    """The file kwok serves as every simulated container's log (CRI format), appended to;
    `restore()` gives it back its first content for the tests after this one."""

    def __init__(self, local_cluster, prefix: str) -> None:
        self.path = local_cluster.state.directory / "pod.log"
        self.original = self.path.read_text()
        self.prefix = prefix
        self.written = 0

    def marker(self, number: int) -> str:
        return f"{self.prefix} line {number}"

    def write(self, count: int) -> None:
        with self.path.open("a") as log:
            for _ in range(count):
                self.written += 1
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
                log.write(f"{stamp} stdout F {self.marker(self.written)}\n")

    def restore(self) -> None:
        self.path.write_text(self.original)


def shown_all(followers: list[Follower], marker: str) -> bool:
    return all(f.shown(marker) is not None for f in followers)


def count_problems(follower: Follower, log: PodLog, run_id: str) -> dict[str, int]:
    """Duplicated and dropped marker lines, gap lines, and state changes shown twice."""
    pattern = re.compile(rf"{re.escape(log.prefix)} line (\d+)$")
    numbers = [int(m.group(1)) for line in follower.lines if (m := pattern.search(line))]
    counts = Counter(numbers)
    states = Counter(
        m.group(1)
        for line in follower.lines
        if (m := re.fullmatch(rf"\[trainstack\] {re.escape(run_id)}: (\w+)", line))
    )
    return {
        "duplicated_lines": sum(n - 1 for n in counts.values()),
        "dropped_lines": sum(1 for n in range(1, log.written + 1) if n not in counts),
        "out_of_order": int(numbers != sorted(numbers)),
        "gap_lines": sum(GAP in line for line in follower.lines),
        "duplicated_states": sum(n - 1 for n in states.values()),
    }


def final_state(follower: Follower, run_id: str) -> str | None:
    states = [
        m.group(1)
        for line in follower.lines
        if (m := re.fullmatch(rf"\[trainstack\] {re.escape(run_id)}: (\w+)", line))
    ]
    return states[-1] if states else None


@pytest.fixture(scope="module")
def served(local_cluster, api_account, moto_s3, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    home = tmp_path_factory.mktemp("serve-restarts")
    with deployed_api(local_cluster, api_account, moto_s3, home, {USER: TOKEN}) as where:
        yield where


def make_whole(local_cluster) -> None:
    """Every process of the session's cluster runs (and is ready), whatever the test left:
    the ones it killed are started again, for the tests after it."""
    state = local_cluster.state
    state.refresh()
    for name in list(state.pids):
        if not cluster._alive(state, name):
            cluster.restart(state, name)


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_followers_ride_out_a_restart(local_cluster, served, component):
    url, ca = served
    short = "api" if component == "kube-apiserver" else "etcd"
    run_id, api_run = f"e2e-restart-{short}", f"e2e-restart-{short}-svc"
    log = PodLog(local_cluster, f"e2e-restart-{short}")
    followers: list[Follower] = []
    try:
        launch = Follower.command(
            "launch --wait",
            local_cluster.spawn("launch", *WHERE, *ONE_NODE, f"run_id={run_id}", "--wait"),
        )
        followers.append(launch)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, verify=str(ca), headers=headers, timeout=60) as c:
            body = {"run_id": api_run, "compute": "p5.48xlarge", "nodes": 1}
            created = c.post("/v1/runs", json=body)
            assert created.status_code == 201, created.text
        for each in (run_id, api_run):
            eventually(lambda r=each: pods_of(local_cluster, r, "Running"), f"{each} runs")
        logs = Follower.command("logs -f", local_cluster.spawn("logs", run_id, "-f", *WHERE))
        api_follow = Follower.api(url, ca, api_run)
        followers += [logs, api_follow]
        log_followers = [logs, api_follow]
        log.write(3)
        eventually(lambda: shown_all(log_followers, log.marker(3)), "lines before the kill")

        killed = time.monotonic()
        cluster.kill(local_cluster.state, component)
        log.write(3)  # written while it is down
        status = local_cluster.spawn("status", run_id, *WHERE)
        with contextlib.suppress(subprocess.TimeoutExpired):
            status.wait(timeout=STATUS_WAIT_S)  # etcd down: it waits for it
        cluster.restart(local_cluster.state, component)
        ready = time.monotonic()
        status_out, _ = status.communicate(timeout=120)
        during = log.marker(4)
        eventually(
            lambda: shown_all(log_followers, log.marker(6)),
            "lines after the restart",
            describe=lambda: {f.name: f.lines[-8:] for f in followers},
        )
        log.write(3)
        eventually(lambda: shown_all(log_followers, log.marker(9)), "lines after that")

        ended_at = time.monotonic()
        for each in (run_id, api_run):
            assert local_cluster.finish(each, 0), f"no running pod of {each} to end"
        codes = {f.name: f.end() for f in followers}
        assert codes["launch --wait"] == 0, launch.lines[-20:]
        assert codes["logs -f"] == 0, logs.lines[-20:]
        problems = {
            f.name: count_problems(f, log, f_run)
            for f, f_run in ((launch, run_id), (logs, run_id), (api_follow, api_run))
        }
        for f, f_run in ((launch, run_id), (logs, run_id), (api_follow, api_run)):
            assert final_state(f, f_run) == "Succeeded", (f.name, f.lines[-20:])
        # --wait shows no log, only states; the log followers every line, once, in order
        states_shown = [line for line in launch.lines if line.startswith("[trainstack]")]
        assert problems["launch --wait"]["duplicated_states"] == 0, states_shown
        for name in ("logs -f", "api follow"):
            assert problems[name] == dict.fromkeys(problems[name], 0), (name, problems)
        status_lines = [line for line in status_out.splitlines() if line.strip()]
        if status.returncode != 0:  # it ends with one line naming what failed
            assert len(status_lines) == 1 and "Traceback" not in status_out, status_out
        else:
            assert run_id in status_out, status_out
        final_seen = launch.seen[-1][0] if launch.seen else ended_at
        figure = {
            "component": component,
            "down_s": round(ready - killed, 1),
            **{
                f"next_line_s[{f.name}]": round((f.shown(during) or killed) - killed, 1)
                for f in log_followers
            },
            "final_s[launch --wait]": round(final_seen - ended_at, 1),
            "status_exit": status.returncode,
            **{  # of the log followers (--wait shows states only)
                key: sum(problems[f.name][key] for f in log_followers)
                for key in ("duplicated_lines", "dropped_lines", "gap_lines")
            },
            "duplicated_states": sum(p["duplicated_states"] for p in problems.values()),
        }
        print(f"\ne2e-figure: scenario 2 restart {figure}")
    finally:
        make_whole(local_cluster)
        log.restore()
        for follower in followers:
            follower.stop()
        for each in (run_id, api_run):
            remove_run(local_cluster, each)
