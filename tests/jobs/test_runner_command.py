"""runner=command + runner.workdir end to end on the local backend: a plain-torch DDP script
written here runs on 2 ranks from its shipped copy, gets the job contract, is seen by
`status`/`plot`, restarts after a SIGKILLed rank and resumes from its own checkpoint; a sweep
over +runner.args.* is one run per value sharing one archive."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import pytest

from jobs.backends import run_state
from jobs.backends.base import SUCCEEDED
from jobs.backends.local.backend import LocalBackend
from tests.jobs.test_local_recovery import finished, wait_until
from tests.procs import processes, ranks_of

DDP_SCRIPT = textwrap.dedent(
    '''
    """A user's plain-torch DDP script: knows nothing of trainstack but its contract env."""
    import argparse, json, os, time
    from pathlib import Path

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helper import MARK  # shipped with the workdir, imported from the unpacked copy

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt_dir = Path(os.environ["TRAINSTACK_CHECKPOINT_DIR"])
    run_dir = Path(os.environ["TRAINSTACK_RUN_DIR"])
    contract = {k: v for k, v in os.environ.items() if k.startswith("TRAINSTACK_")}
    contract.update(
        rank=rank, world=world, local_rank=os.environ["LOCAL_RANK"], cwd=os.getcwd(),
        mark=MARK, lr=args.lr,
    )
    (run_dir / f"contract-rank{rank}.json").write_text(json.dumps(contract))

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    ckpt = ckpt_dir / "last.pt"
    if ckpt.exists():
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        print(f"resumed from step {start}", flush=True)
    x = torch.ones(8, 4) * (rank + 1)
    for step in range(start + 1, args.steps + 1):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            tmp = ckpt_dir / "last.pt.tmp"
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, ckpt)
            metrics = Path(os.environ["TRAINSTACK_METRICS"])
            metrics.parent.mkdir(parents=True, exist_ok=True)
            with metrics.open("a") as f:
                f.write(json.dumps({"step": step, "loss": loss.item()}) + "\\n")
        dist.barrier()
        if not start:  # slow steps in the first attempt only: a restart runs at full speed
            time.sleep(float(os.environ.get("STEP_S", "0")))
    dist.destroy_process_group()
    '''
)


def write_project(root: Path, mark: str = "v1") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(DDP_SCRIPT)
    (root / "helper.py").write_text(f"MARK = {mark!r}\n")
    return root


def command_job(workdir: Path, project: Path, run_id: str, *extra: str):
    from datetime import UTC, datetime

    from jobs.compose import compose
    from jobs.materialize import materialize

    overrides = [
        "runner=command",
        "runner.command=[python,-u,train.py]",
        f"runner.workdir={project}",
        f"storage.root={workdir / 'runs'}",
        f"run_id={run_id}",
        *extra,
    ]
    return materialize(compose(overrides), now=datetime.now(UTC), git_sha=None)


def output_of(run_dir: Path) -> str:
    return (run_dir / run_state.OUTPUT_LOG).read_text()


@pytest.mark.slow
def test_a_ddp_script_runs_from_its_workdir_copy_with_the_contract(workdir, cli):
    project = write_project(workdir / "project")
    backend = LocalBackend(str(workdir / "runs"))
    job = command_job(workdir, project, "ddp", "+runner.args.lr=0.05")
    # Edited after launch: the run must not see it (it runs the archive packed at launch).
    (project / "helper.py").write_text("MARK = 'edited'\n")
    backend.schedule(backend.dryrun(job))
    status = finished(backend, "ddp")
    run_dir = workdir / "runs" / "ddp"
    assert (status.state, status.exit_code) == (SUCCEEDED, 0), output_of(run_dir)[-3000:]

    sha = job.cfg.runner.code
    code_dir = run_dir / "job" / "code"
    for rank in (0, 1):
        contract = json.loads((run_dir / f"contract-rank{rank}.json").read_text())
        assert (contract["rank"], contract["world"], contract["local_rank"]) == (
            rank,
            2,
            str(rank),
        )
        assert contract["TRAINSTACK_RUN_ID"] == "ddp"
        assert contract["TRAINSTACK_RUN_DIR"] == str(run_dir)
        assert contract["TRAINSTACK_CHECKPOINT_DIR"] == str(run_dir / "checkpoints")
        assert contract["TRAINSTACK_METRICS"] == str(run_dir / "logs" / "metrics.jsonl")
        assert contract["cwd"] == str(code_dir)
        assert (contract["mark"], contract["lr"]) == ("v1", 0.05)
    # Stored once under the run dir; the run record holds the hash.
    assert [p.name for p in (run_dir / "code").iterdir()] == [f"{sha}.tar.gz"]
    assert f"code: {sha}" in (run_dir / "config.yaml").read_text()
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    # runs/status/plot read the program's metrics lines.
    assert (status.last_step, round(status.last_loss, 6)) == (8, round(_last_loss(run_dir), 6))
    shown = cli("status", "ddp", f"storage.root={workdir / 'runs'}")
    assert shown.code == 0 and "last step  8" in shown.out, shown.err
    plotted = cli("plot", "ddp", "-o", str(workdir / "ddp.png"), f"storage.root={workdir / 'runs'}")
    assert plotted.code == 0, plotted.err
    assert (workdir / "ddp.png").stat().st_size > 1000


def _last_loss(run_dir: Path) -> float:
    lines = (run_dir / "logs" / "metrics.jsonl").read_text().splitlines()
    return json.loads(lines[-1])["loss"]


@pytest.mark.slow
def test_a_sigkilled_rank_restarts_and_the_script_resumes_from_its_checkpoint(workdir):
    project = write_project(workdir / "project")
    backend = LocalBackend(str(workdir / "runs"))
    job = command_job(workdir, project, "killed", "+runner.env.STEP_S=0.4", "+runner.args.steps=14")
    backend.schedule(backend.dryrun(job))
    wait_until(lambda: (backend.status("killed").last_step or 0) >= 4, "step 4")
    victim = ranks_of("killed", "train.py")[1]
    os.kill(victim, signal.SIGKILL)
    status = finished(backend, "killed")
    run_dir = workdir / "runs" / "killed"
    output = output_of(run_dir)
    assert (status.state, status.exit_code) == (SUCCEEDED, 0), output[-3000:]
    assert "resumed from step" in output  # torchrun restarted both ranks; no client involved
    steps = [json.loads(line)["step"] for line in (run_dir / "logs/metrics.jsonl").open()]
    resumed_at = int(output.split("resumed from step ")[1].split()[0])
    assert resumed_at >= 4
    assert steps[-1] == 14 and sorted(set(steps)) == list(range(1, 15))
    assert victim not in {p.pid for p in processes()}


@pytest.mark.slow
def test_a_sweep_over_runner_args_is_one_run_per_value_sharing_one_archive(workdir, cli):
    project = write_project(workdir / "project")
    result = cli(
        "launch",
        "-m",
        "runner=command",
        "runner.command=[python,-u,train.py]",
        f"runner.workdir={project}",
        "storage.root=runs",
        "+runner.args.lr=0.1,0.2",
        "+runner.args.steps=2",
        "sweep_id=lrsweep",
    )
    assert result.code == 0, result.err[-2000:]
    runs = sorted((workdir / "runs").glob("lrsweep-*"))
    assert len(runs) == 2
    lrs, archives = set(), set()
    for run_dir in runs:
        contract = json.loads((run_dir / "contract-rank0.json").read_text())
        lrs.add(contract["lr"])
        archives |= {p.name for p in (run_dir / "code").iterdir()}
    assert lrs == {0.1, 0.2}
    assert len(archives) == 1  # every point ships the same archive
