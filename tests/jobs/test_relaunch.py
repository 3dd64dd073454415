"""A relaunch of an existing run (`trainstack launch run_id=X ...`): the run's recorded
config with the command line's allowed changes on top; other changes refused in one line,
nothing rewritten. Real torchrun on the local backend."""

from __future__ import annotations

import json

import pytest
import yaml
from omegaconf import OmegaConf

from jobs.compose import compose
from jobs.errors import JobConfigError
from jobs.relaunch import MUTABLE_KEYS, mutable, relaunch_config
from tests.jobs.conftest import SAMPLE_DATA
from tests.jobs.test_launch_local import logged_steps

MINE = [
    f"data.path={SAMPLE_DATA}",
    "data.seq_len=64",
    "model.n_layers=2",
    "model.dim=128",
    "trainer.micro_batch_size=2",
    "trainer.log_interval=1",
    "trainer.eval_interval=0",
    "trainer.warmup_steps=1",
    "trainer.checkpoint.interval=2",
    "trainer.peak_tflops=0.1",
    "compute.procs_per_node=1",
    "run_id=mine1",
]
RECORDS = ("config.yaml", "job/config.yaml", "job/launch.yaml", "job/state.json")


@pytest.mark.slow
def test_relaunch_resumes_with_the_runs_own_config(cli, workdir):
    first = cli("launch", *MINE, "trainer.max_steps=2")
    assert first.code == 0, first.err + first.out[-2000:]
    run_dir = workdir / "runs" / "mine1"
    before = {name: (run_dir / name).read_bytes() for name in RECORDS}

    # Changes to the model, the data or the layout: one line naming the key, nothing written.
    for change, key in [
        ("model.dim=256", "model.dim"),
        ("model=llama3_1b", "model.name"),
        ("data.seq_len=32", "data.seq_len"),
        ("trainer.lr=0.1", "trainer.lr"),
        ("compute.procs_per_node=2", "compute.procs_per_node"),
    ]:
        refused = cli("launch", "run_id=mine1", change)
        assert refused.code == 2, (change, refused.err, refused.out[-1000:])
        assert refused.err.startswith(f"trainstack launch: {key}: run mine1 was launched with")
        assert refused.err.count("\n") == 1 and "new run_id" in refused.err
        assert {name: (run_dir / name).read_bytes() for name in RECORDS} == before

    # run_id alone (the sample corpus path the defaults name does not exist here) + steps.
    again = cli("launch", "run_id=mine1", "trainer.max_steps=4")
    assert again.code == 0, again.err + again.out[-2000:]
    assert "its recorded config" in again.out and "resuming" in again.out
    assert [r["step"] for r in logged_steps(run_dir)] == [1, 2, 3, 4]
    record = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert (record["model"]["dim"], record["trainer"]["max_steps"]) == (128, 4)
    assert record["data"]["path"] == SAMPLE_DATA
    state = json.loads((run_dir / "job" / "state.json").read_text())
    assert (state["attempt"], state["exit_code"]) == (2, 0)
    request = json.loads((run_dir / "job" / "request.json").read_text())
    assert request["env"]["PET_NPROC_PER_NODE"] == "1"  # the run's layout, not the default 2


def test_relaunch_applies_mutable_keys_over_the_record_and_leaves_new_runs_alone(workdir):
    record = compose(["model.dim=128", "run_id=r1", "trainer.max_steps=5"])
    state = workdir / "runs" / "r1" / "job"
    state.mkdir(parents=True)
    (state / "launch.yaml").write_text(OmegaConf.to_yaml(record))
    typed = ["run_id=r1", "trainer.max_steps=9", "trainer.metrics.tensorboard=true"]
    cfg, where = relaunch_config(compose(typed), typed)
    assert where == "runs/r1/job/launch.yaml"
    assert (cfg.model.dim, cfg.trainer.max_steps, cfg.trainer.metrics.tensorboard) == (
        128,
        9,
        True,
    )
    # Retyping a recorded value is no change; a new run id is composed as typed.
    same = ["run_id=r1", "model.dim=128"]
    assert relaunch_config(compose(same), same)[0].model.dim == 128
    new = ["run_id=r2", "model.dim=64"]
    cfg, where = relaunch_config(compose(new), new)
    assert (where, cfg.model.dim) == (None, 64)


def test_mutable_keys_are_steps_intervals_and_loggers_never_model_data_or_layout():
    assert mutable("trainer.max_steps") and mutable("trainer.checkpoint.interval")
    assert mutable("trainer.metrics.wandb_project") and mutable("trainer.eval_interval")
    for key in ("model.dim", "data.path", "trainer.lr", "compute.nodes", "storage.root", "seed"):
        assert not mutable(key), key
    assert len(set(MUTABLE_KEYS)) == len(MUTABLE_KEYS)


def test_a_global_group_on_a_relaunch_changes_only_the_keys_its_option_sets(workdir):
    """`experiment=smoke` again on a smoke run keeps the run's own model; on another run it
    is refused at the first key it would change that a relaunch may not."""
    for run_id, launched in (("r1", []), ("r3", ["experiment=smoke"])):
        record = compose([*launched, "model.dim=128", f"run_id={run_id}"])
        state = workdir / "runs" / run_id / "job"
        state.mkdir(parents=True)
        (state / "launch.yaml").write_text(OmegaConf.to_yaml(record))
    typed = ["run_id=r3", "experiment=smoke", "trainer.max_steps=30"]
    cfg, _ = relaunch_config(compose(typed), typed)
    assert (cfg.model.dim, cfg.trainer.max_steps, cfg.trainer.warmup_steps) == (128, 30, 4)
    typed = ["run_id=r1", "experiment=smoke"]
    with pytest.raises(JobConfigError, match=r"^trainer\.warmup_steps: run r1 was launched"):
        relaunch_config(compose(typed), typed)
