"""The local backend: the pod's command and environment, run as torchrun processes here.

What the training operator would add on a cluster (PET_* variables torchrun reads: nodes,
processes per node, rendezvous) the backend adds here the same way, with a standalone
rendezvous on this host. A small supervisor process (`jobs.backends.local.supervisor`) owns
torchrun and records its state in `<run dir>/job/state.json`, so `status`, `logs` and `cancel`
work from any shell while `trainstack launch` streams progress. With `eval.every_checkpoint`
the supervisor then scores the run's checkpoints (`jobs.backends.local.evals`: why there).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from contract import run_dir as run_layout
from contract.run_dir import JOB_DIR, RESTARTS_FILE_ENV
from jobs.backends import run_state
from jobs.backends.base import (
    FAILED,
    FINISHED_STATES,
    PENDING,
    RUNNING,
    BackendError,
    DryRun,
    RunStatus,
    matching,
)
from jobs.backends.kubernetes.client.kinds import RAYJOB
from jobs.backends.kubernetes.manifests import trainer_config_yaml
from jobs.materialize import MaterializedJob
from jobs.run_dirs import LOCAL_STATE_ROOT
from jobs.runners import runner_named
from jobs.runners.program import SCRATCH_DIR
from jobs.spec import POD_CONFIG_PATH
from jobs.validate_eval import eval_settings

CONFIG_FILE = f"{JOB_DIR}/{run_layout.CONFIG_FILE}"
RAY_CLUSTER = "jobs.backends.local.ray_cluster"
KIND_LAUNCHERS = {RAYJOB.api: RAY_CLUSTER}
"""`job.api` -> the module that stands in for the kind's operator here, in front of the
pod's command (a RayJob: a one-node Ray cluster and Ray's Jobs SDK); other kinds run the
command as is (torchrun, as their pods do)."""
LAUNCH_FILE = f"{JOB_DIR}/launch.yaml"
RESTARTS_FILE = f"{JOB_DIR}/restarts"
"""torchrun's restarts of the ranks in the latest attempt (trainer.launch writes it)."""
EVAL_REPORT = run_state.EVAL_REPORT
EVALUATOR = "jobs.backends.local.evals"


@dataclass(frozen=True)
class LocalRequest:
    argv: list[str]
    env: dict[str, str]
    """Added to this process's environment: the spec's env plus the operator's PET_*."""
    cwd: str
    state_dir: str
    """Local directory holding job/ (the run dir, or runs/<run_id> for a remote run dir)."""
    config_text: str
    eval_argv: list[str] | None = None
    """Run once torchrun exited 0 (`eval.every_checkpoint`): scores the checkpoints."""


CONTRACT_PATHS = (
    "TRAINSTACK_RUN_DIR",
    "TRAINSTACK_CHECKPOINT_DIR",
    "TRAINSTACK_CHECKPOINT_URI",
    "TRAINSTACK_METRICS",
)
"""Absolute here for programs of other runners: a workdir's program starts in its own copy."""


def local_value(value: str, config_path: str, state_dir: str) -> str:
    """A pod path in the command or env -> its place here: the image's `python` is this
    interpreter (the venv's), the mounted config is the run's job/config.yaml, the pod's
    scratch dir (unpacked workdir, metrics of an s3:// run) is the run's job/."""
    if value == "python":
        return sys.executable
    if value == POD_CONFIG_PATH:
        return config_path
    if value == SCRATCH_DIR or value.startswith(f"{SCRATCH_DIR}/"):
        return f"{state_dir}/job{value[len(SCRATCH_DIR) :]}"
    return value


def launch_record(job: MaterializedJob) -> str:
    """The whole composed job, as a relaunch of the run reads it back (jobs/relaunch.py)."""

    return OmegaConf.to_yaml(job.cfg, resolve=True)


def operator_env(nproc_per_node: int, state_dir: str) -> dict[str, str]:
    """What the operator sets in a pod, for one node here; plus per-rank log prefixes and
    where the launcher counts its restarts."""
    return {
        "PET_NNODES": "1",
        "PET_NPROC_PER_NODE": str(nproc_per_node),
        "PET_STANDALONE": "1",
        "PET_TEE": "3",
        "PET_LOG_DIR": f"{state_dir}/{JOB_DIR}/torchrun",
        RESTARTS_FILE_ENV: f"{state_dir}/{RESTARTS_FILE}",
    }


class LocalBackend:
    name = "local"

    def __init__(self, runs_root: str = "runs", cwd: str | None = None):
        remote = runs_root.startswith("s3://")
        self.state_root = Path(LOCAL_STATE_ROOT if remote else runs_root)
        self.cwd = cwd or os.getcwd()

    @classmethod
    def from_config(cls, cfg: Any, shared: Any = None) -> LocalBackend:
        """`shared` is unused: its instances share nothing (the run dirs hold the state)."""
        return cls(runs_root=cfg.storage.root)

    def state_dir(self, run_id: str) -> Path:
        return self.state_root / run_id

    def dryrun(self, job: MaterializedJob) -> DryRun:
        spec = job.spec
        state_dir = str(self.state_dir(spec.name))
        wrapped = not runner_named(spec.runner).builtin
        if wrapped:
            state_dir = os.path.join(self.cwd, state_dir)
        config_path = f"{state_dir}/{CONFIG_FILE}"
        argv = [local_value(a, config_path, state_dir) for a in spec.command]
        env = {k: local_value(v, config_path, state_dir) for k, v in spec.env.items()}
        if wrapped:
            for key in CONTRACT_PATHS:
                if key in env and "://" not in env[key]:
                    env[key] = os.path.join(self.cwd, env[key])
        env.update(operator_env(spec.nproc_per_node, state_dir))
        launcher = KIND_LAUNCHERS.get(job.cfg.job.api)
        if launcher is not None:
            cpus = f"--num-cpus={spec.nproc_per_node}"
            argv = [sys.executable, "-m", launcher, cpus, f"--cwd={self.cwd}", "--", *argv]
        if spec.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
            # What torchrun sets for several processes anyway, set here so that it does not
            # print its four-line warning about doing so on every launch.
            env["OMP_NUM_THREADS"] = "1"
        evaluate = evaluator_argv(job, state_dir)
        request = LocalRequest(
            argv, env, self.cwd, state_dir, trainer_config_yaml(spec), eval_argv=evaluate
        )
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        text = (
            f"# {config_path}:\n{request.config_text}"
            f"cd {shlex.quote(self.cwd)} && {assigns} {shlex.join(argv)}\n"
        )
        if evaluate:
            text += f"# then, if it succeeded (eval.every_checkpoint):\n{shlex.join(evaluate)}\n"
        return DryRun(backend=self.name, job=job, request=request, text=text)

    def schedule(self, dryrun: DryRun) -> str:
        request: LocalRequest = dryrun.request
        job = dryrun.job
        state_dir = Path(request.state_dir)
        previous = run_state.read_state(state_dir)
        if previous and previous.get("state") in (PENDING, RUNNING) and _alive(previous):
            raise BackendError(
                f"run_id: {job.run_id} is already running (pid {previous.get('pid')}); "
                "cancel it or choose another run_id"
            )
        if previous and _evaluating(previous):
            raise BackendError(
                f"run_id: {job.run_id} is still scoring its checkpoints (eval.every_checkpoint, "
                f"pid {previous.get('eval_pid')}); wait for it, or `trainstack cancel "
                f"{job.run_id}` stops the evaluation"
            )
        job.store_code()  # before any state: a failed store leaves no half run
        # The run's record (jobs/relaunch.py): written only now that the job validated, and
        # atomically, so a launch that fails leaves the previous one whole.
        run_state.write_atomic(state_dir / CONFIG_FILE, request.config_text)
        run_state.write_atomic(state_dir / LAUNCH_FILE, launch_record(job))
        (state_dir / run_state.CANCEL_MARKER).unlink(missing_ok=True)
        (state_dir / RESTARTS_FILE).unlink(missing_ok=True)  # counted per attempt
        (state_dir / EVAL_REPORT).unlink(missing_ok=True)
        asked = {"argv": request.argv, "env": request.env, "cwd": request.cwd}
        if request.eval_argv:
            asked["eval_argv"] = request.eval_argv
        (state_dir / run_state.REQUEST_FILE).write_text(json.dumps(asked, indent=2))
        attempt = (previous or {}).get("attempt", 0) + 1
        log = state_dir / run_state.OUTPUT_LOG
        log_offset = log.stat().st_size if log.is_file() else 0
        run_state.write_state(
            state_dir,
            {
                "run_id": job.run_id,
                "sweep_id": job.spec.labels.get("trainstack.io/sweep-id"),
                "backend": self.name,
                "state": PENDING,
                "nodes": 1,
                "ranks": job.spec.nproc_per_node,
                "run_dir": job.spec.run_dir,
                "command": request.argv,
                "attempt": attempt,
                "log_offset": log_offset,
                "started_at": run_state.utc_now(),
                "finished_at": None,
                "exit_code": None,
                "pid": None,
            },
        )
        # Detached: the run outlives this shell; the supervisor alone writes state from here.
        subprocess.Popen(
            [sys.executable, "-m", "jobs.backends.local.supervisor", str(state_dir.resolve())],
            cwd=request.cwd,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return job.run_id

    def _state(self, run_id: str) -> tuple[Path, dict]:
        state_dir = self.state_dir(run_id)
        state = run_state.read_state(state_dir)
        if state is None or state.get("backend") != self.name:
            raise BackendError(f"no local run {run_id!r} under {self.state_root}/")
        return state_dir, state

    def status(self, run_id: str) -> RunStatus:
        return _status(*self._state(run_id))

    def list_runs(self, sweep_id: str | None = None, state: str | None = None) -> list[RunStatus]:
        runs = [_status(d, s) for d, s in run_state.list_states(self.state_root, self.name)]
        return matching(runs, sweep_id, state)

    def logs(self, run_id: str, rank: int = 0, follow: bool = False) -> Iterator[str]:
        """Lines of the run's combined output (following: its latest attempt's, which a
        relaunch streams without the attempts before); torchrun prefixes worker lines with
        `[default<rank>]:` (one node here: local rank = rank), so `rank` filters those while
        launcher lines pass through."""
        state_dir, state = self._state(run_id)
        path = state_dir / run_state.OUTPUT_LOG
        own = f"[default{rank}]:"
        offset, partial = (int(state.get("log_offset", 0)) if follow else 0), b""
        while True:
            # Checked before reading: that read then sees everything written before the end.
            finished = self._finished(state_dir)
            chunk = _read_from(path, offset)
            offset += len(chunk)
            # Bytes, not text: a read may end inside a UTF-8 character or a line, which waits
            # for the next read (a finished run's unterminated last line is still shown).
            *lines, partial = (partial + chunk).split(b"\n")
            if finished and partial:
                lines, partial = [*lines, partial], b""
            for raw in lines:
                line = raw.decode(errors="replace").removesuffix("\r")
                if line.startswith(own) or not line.startswith("[default"):
                    yield line
            if finished or not follow:
                return
            time.sleep(0.2)

    def _finished(self, state_dir: Path) -> bool:
        """Trained and, with eval.every_checkpoint, scored (or its supervisor is gone)."""
        state = run_state.read_state(state_dir) or {}
        if not _alive(state):
            return True
        return state.get("state") in FINISHED_STATES and state.get("evals") != RUNNING

    def cancel(self, run_id: str) -> None:
        """SIGTERM to torchrun, which forwards it to the trainer (checkpoint, exit 143); after
        training, to the evaluation scoring its checkpoints (the run stays succeeded)."""
        try:
            state_dir, state = self._state(run_id)
        except BackendError:
            return
        if _evaluating(state):
            (state_dir / run_state.CANCEL_MARKER).touch()
            pid = (run_state.read_state(state_dir) or state).get("eval_pid")
            if pid:
                _signal(pid, signal.SIGTERM)
            return
        if state.get("state") not in (PENDING, RUNNING) or not _alive(state):
            return
        (state_dir / run_state.CANCEL_MARKER).touch()
        # Read again after the marker: a run still pending above may have started since (the
        # supervisor checks the marker once it has written the pid, so one of the two stops it).
        pid = (run_state.read_state(state_dir) or state).get("pid")
        if pid:
            _signal(pid, signal.SIGTERM)


def evaluator_argv(job: MaterializedJob, state_dir: str) -> list[str] | None:
    """The supervisor's command after training (`eval.every_checkpoint`), or None."""
    settings = eval_settings(job.cfg)
    if settings is None:
        return None
    if settings.include_path is not None:  # as checked at launch, from wherever it runs
        settings.include_path = os.path.abspath(settings.include_path)
    return [
        sys.executable,
        "-m",
        EVALUATOR,
        f"--run-dir={job.spec.run_dir}",
        f"--report={state_dir}/{EVAL_REPORT}",
        f"--settings={json.dumps(asdict(settings), separators=(',', ':'))}",
    ]


def _evaluating(state: dict) -> bool:
    """The supervisor is scoring the run's checkpoints (after it trained)."""
    return state.get("evals") == RUNNING and _alive(state)


def _status(state_dir: Path, state: dict) -> RunStatus:
    if state.get("state") in (PENDING, RUNNING) and not _alive(state):
        state = {**state, "state": FAILED, "message": "launcher process vanished"}
    elif state.get("evals") == RUNNING and not _alive(state):
        state = {**state, "message": "eval: stopped unfinished (its supervisor vanished)"}
    status = run_state.to_status(state_dir, state)
    return replace(status, log_ranks=_ranks(state_dir, state), restarts=_restarts(state_dir))


def _restarts(state_dir: Path) -> int:
    """job/restarts: a number the launcher wrote (the run's own processes can write there
    too: read 32 bytes at most, anything else is 0)."""
    text = _read_from(state_dir / RESTARTS_FILE, 0, limit=32).decode(errors="replace").strip()
    return int(text) if text.isdigit() else 0


def _ranks(state_dir: Path, state: dict) -> int | None:
    """The run's processes: state.json's `ranks`, or (runs started before it was recorded)
    the request's PET_NPROC_PER_NODE; None when neither says."""
    if "ranks" in state:
        return int(state["ranks"])
    try:
        request = json.loads((state_dir / run_state.REQUEST_FILE).read_text())
        return int(request["env"]["PET_NPROC_PER_NODE"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_from(path: Path, offset: int, limit: int = -1) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _alive(state: dict) -> bool:
    pid = state.get("supervisor_pid") or state.get("pid")
    if not pid:
        return state.get("state") == PENDING
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Dead but not yet reaped (its parent, e.g. the `trainstack launch` that started it, is
    still running): signal 0 still reaches it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no procfs here: trust the signal
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


BACKEND = LocalBackend
