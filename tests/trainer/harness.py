"""Run the real trainer (torchrun, or plain python for nproc=0) on a small model, and read
what it left in its run dir. `launch_trainer` is the plain function behind the fixtures in
conftest.py, for module-scoped runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu.procs import descendants
from testing_support.overrides import SMALL_MODEL

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

SAMPLE = REPO / "data/sample/train.jsonl"
SMALL_CORPUS_DOCS = 120  # the first chapters of the sample: ~0.4 MB, quick to tokenize


@dataclass
class TrainerResult:
    returncode: int
    stdout: str
    stderr: str
    run_dir: str


class TrainerProcess:
    """A trainer started in its own session, so a test can signal torchrun or the whole group."""

    def __init__(self, cmd: list[str], env: dict[str, str], run_dir: str, log_dir: Path):
        self.run_dir = run_dir
        self._out = (log_dir / "stdout.txt").open("w+")
        self._err = (log_dir / "stderr.txt").open("w+")
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=self._out, stderr=self._err, start_new_session=True
        )

    def output(self) -> str:
        self._out.flush()
        return Path(self._out.name).read_text()

    def wait_for(self, condition: Callable[[], bool], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                raise AssertionError(f"trainer exited {self.proc.returncode}:\n{self.stderr()}")
            if time.monotonic() > deadline:
                self.kill_group()
                raise AssertionError(f"timed out waiting; stdout:\n{self.output()}")
            time.sleep(0.05)

    def stderr(self) -> str:
        self._err.flush()
        return Path(self._err.name).read_text()

    def signal(self, signum: int) -> None:
        """Signal torchrun alone, as kubelet signals a container's main process."""
        self.proc.send_signal(signum)

    def kill_group(self) -> None:
        """SIGKILL torchrun and every worker at once: a node lost without warning. torchrun
        starts each worker in its own session, so the workers are found by parentage (they
        would outlive the test otherwise)."""
        workers = descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def finish(self, timeout: float = 240) -> TrainerResult:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise
        return TrainerResult(self.proc.returncode, self.output(), self.stderr(), self.run_dir)


def trainer_command(
    nproc: int,
    config: Path,
    overrides: list[str],
    launcher: str = "torchrun",
    torchrun_args: tuple[str, ...] = (),
    module: str = "trainer",
) -> list[str]:
    """nproc=0: plain `python -m trainer`; else `torchrun` or `python -m trainer.launch`
    (with `torchrun_args`, e.g. --max-restarts=2). `module`: a test's wrapper of the trainer's
    entry point (tests/trainer/*_worker.py) instead of `trainer`."""
    trainer = ["-m", module, "--config", str(config), *overrides]
    if nproc == 0:
        return [str(BIN / "python"), *trainer]
    start = [str(BIN / "python"), "-m", launcher]
    if launcher == "torchrun":
        start = [str(BIN / "torchrun")]
    return [*start, "--standalone", f"--nproc_per_node={nproc}", *torchrun_args, *trainer]


def read_metrics(run_dir: str) -> list[dict]:
    from trainer.storage import open_run_storage

    text = open_run_storage(run_dir).read_text("logs/metrics.jsonl")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def losses_by_step(run_dir: str) -> dict[int, float]:
    """Training loss per step; a step logged twice (before a kill and after resuming) keeps
    the later value."""
    return {r["step"]: r["loss"] for r in read_metrics(run_dir) if "loss" in r}


def committed_steps(run_dir: Path) -> list[int]:
    ckpts = run_dir / "checkpoints"
    if not ckpts.is_dir():
        return []
    return sorted(int(d.name[5:]) for d in ckpts.iterdir() if (d / "COMMITTED").exists())


def launch_trainer(
    work_dir: Path,
    nproc: int,
    overrides: list[str],
    *,
    run_dir: str | None = None,
    env: dict[str, str] | None = None,
    small: bool = True,
    launcher: str = "torchrun",
    torchrun_args: tuple[str, ...] = (),
    module: str = "trainer",
) -> TrainerProcess:
    """Start the trainer; its config, stdout and stderr go to a fresh folder of `work_dir`."""
    run_dir = run_dir or str(work_dir / "run")
    log_dir = work_dir / f"launch-{len(list(work_dir.glob('launch-*')))}"
    log_dir.mkdir()
    config = log_dir / "config.yaml"
    config.write_text(f"run_dir: {run_dir}\nseed: 0\n")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    args = [*(SMALL_MODEL if small else []), *overrides]
    if small:
        corpus = work_dir / "corpus.jsonl"
        if not corpus.exists():
            lines = SAMPLE.read_text().splitlines(keepends=True)[:SMALL_CORPUS_DOCS]
            corpus.write_text("".join(lines))
        args.insert(0, f"data.path={corpus}")
    command = trainer_command(nproc, config, args, launcher, torchrun_args, module)
    return TrainerProcess(command, full_env, run_dir, log_dir)
