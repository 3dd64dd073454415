"""Fixtures every suite may use. Kept light: stdlib at import time, moto/boto3 only when a
fixture that needs them runs.

`run_trainer(nproc, overrides)` runs the real trainer to completion; `start_trainer(...)` returns
a live `TrainerProcess` for tests that kill or signal it (helpers in `tests.trainer.harness`).
Both take `run_dir=` (an s3:// URI works, with the AWS_* variables in `env=`), `env=`, `small=`
(False: the default job's model) and `launcher=` ("torchrun", or "trainer.launch" for the
exit-code-keeping wrapper).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing_support.s3_server import FaultProxy, MotoS3, s3_env
from tests.procs import SESSION_MARKER, Proc, processes
from tests.trainer.harness import TrainerProcess, TrainerResult, launch_trainer

# Every process this session starts inherits the marker: the check below finds its leftovers.
os.environ.setdefault(SESSION_MARKER, f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
# Runs are labelled with their owner (job.owner: $TRAINSTACK_USER, else $USER): one fixed name,
# so rendered manifests do not depend on who runs the suite.
os.environ["TRAINSTACK_USER"] = "tester"
LEFTOVER_GRACE_S = 20.0
"""How long trainer processes of this session may take to exit after the last test (a
SIGTERMed rank checkpoints first)."""


def leftover_trainer_processes(grace_s: float = LEFTOVER_GRACE_S) -> list[Proc]:
    """trainer ranks, torchrun/trainer.launch and local supervisors this session started that
    are still alive after `grace_s`."""
    deadline = time.monotonic() + grace_s
    while True:
        mine = processes(**{SESSION_MARKER: os.environ[SESSION_MARKER]})
        left = [p for p in mine if p.is_trainstack]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


SESSION_TMP = pytest.StashKey[tuple]()
"""(the session's temporary root, the TMPDIR it replaced)"""


def pytest_configure(config: pytest.Config) -> None:
    """One temporary root for the whole session, removed at its end: every process the suite
    starts inherits it as TMPDIR, so what they leave in their temp dir (torchrun's
    `torchelastic_*` log dirs, a logging client's files) and pytest's own `tmp_path`s go with
    it. Not with an explicit --basetemp, which the caller keeps."""
    if config.option.basetemp:
        return
    root = tempfile.mkdtemp(prefix="trainstack-tests-")
    config.stash[SESSION_TMP] = (root, os.environ.get("TMPDIR"))
    os.environ["TMPDIR"] = tempfile.tempdir = root


def pytest_unconfigure(config: pytest.Config) -> None:
    root, saved = config.stash.get(SESSION_TMP, (None, None))
    if root is None:
        return
    tempfile.tempdir = None
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    shutil.rmtree(root, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite fails if it leaves a trainer process behind (then kills them)."""
    left = leftover_trainer_processes()
    if not left:
        return
    for proc in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    listing = "; ".join(f"pid {p.pid}: {' '.join(p.argv)[:120]}" for p in left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"FAILED: trainer processes left behind by the suite: {listing}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def exec_in_process(monkeypatch: pytest.MonkeyPatch):
    """`trainstack launch` replaces its process (`os.execve`) with the Hydra app. In-process
    tests run that new program in this process instead: `sys.argv` and the environment as the
    exec sets them (the program named `trainstack`, as the installed script is), then
    `jobs.cli.main()`, whose exit code ends the "process" as SystemExit. Subprocess tests
    (the README's commands, the wheel, tests/jobs/test_launch_exec.py) run the real exec."""

    def execve(path: str, args: list[str], env: dict[str, str]) -> None:
        from jobs.cli import main

        assert path == sys.executable, path
        hydra_args = args[3:] if args[1] == "-m" else args[2:]
        monkeypatch.setattr(sys, "argv", ["trainstack", *hydra_args])
        for name in set(os.environ) - set(env):
            monkeypatch.delenv(name)
        for name, value in env.items():
            if os.environ.get(name) != value:
                monkeypatch.setenv(name, value)
        raise SystemExit(main())

    monkeypatch.setattr(os, "execve", execve)


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """moto's S3 server on 127.0.0.1, shared by the session (tests isolate by bucket)."""
    server = MotoS3().start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(moto_s3: MotoS3) -> str:
    """A fresh, empty bucket on the moto server."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    moto_s3.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_direct(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> MotoS3:
    """boto3 in this process (and children given os.environ) talks straight to moto."""
    for name, value in s3_env(moto_s3.url).items():
        monkeypatch.setenv(name, value)
    return moto_s3


@pytest.fixture
def fault_proxy(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """boto3 talks to moto through a `FaultProxy` (no faults until a rule is set)."""
    proxy = FaultProxy(moto_s3.url).start()
    for name, value in s3_env(proxy.url).items():
        monkeypatch.setenv(name, value)
    yield proxy
    proxy.stop()


@pytest.fixture
def start_trainer(tmp_path: Path):
    """start_trainer(nproc, overrides, run_dir=None, env=None, small=True) -> TrainerProcess;
    anything still running at the end of the test is killed."""
    started: list[TrainerProcess] = []

    def start(nproc: int, overrides: list[str], **kwargs) -> TrainerProcess:
        started.append(launch_trainer(tmp_path, nproc, overrides, **kwargs))
        return started[-1]

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.kill_group()


@pytest.fixture
def run_trainer(start_trainer):
    """run_trainer(nproc, overrides, run_dir=None, env=None, small=True) -> TrainerResult.
    nproc=0 runs `python -m trainer` without torchrun."""

    def run(nproc: int, overrides: list[str], **kwargs) -> TrainerResult:
        return start_trainer(nproc, overrides, **kwargs).finish()

    return run
