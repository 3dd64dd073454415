"""A Ray Train program for job.api=rayjob: TorchTrainer with 2 CPU workers (gloo), a tiny
regression, a checkpoint per epoch. Ray starts the workers; this is the driver.

    trainstack launch job.api=rayjob runner=command runner.torchrun=false \
      'runner.command=[python,examples/ray/train_torch.py]'

Checkpoints go where the job contract says (TRAINSTACK_CHECKPOINT_URI: the run dir's
checkpoints/, a local path here, s3:// on a cluster, which every Ray worker can reach); a
second run of the same run id resumes from the newest one.
"""

from __future__ import annotations

import os
import tempfile

import ray.train
import torch
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model

EPOCHS = 3


def train_loop(config: dict) -> None:
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(4, 1))  # DDP over the workers' gloo group
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, "state.pt"))
        model.module.load_state_dict(state["model"])
        start = state["epoch"] + 1
    x = torch.randn(256, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    for epoch in range(start, EPOCHS):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with tempfile.TemporaryDirectory() as folder:
            saved = None
            if ray.train.get_context().get_world_rank() == 0:
                state = {"model": model.module.state_dict(), "epoch": epoch}
                torch.save(state, os.path.join(folder, "state.pt"))
                saved = Checkpoint.from_directory(folder)
            ray.train.report({"epoch": epoch, "loss": loss.item()}, checkpoint=saved)


def main() -> None:
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"lr": 0.05},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(
            name=os.environ.get("TRAINSTACK_RUN_ID", "ray-train"),
            storage_path=os.environ.get("TRAINSTACK_CHECKPOINT_URI", "/tmp/ray-train"),
        ),
    )
    result = trainer.fit()
    print(f"ray-train: finished, loss {result.metrics['loss']:.4f}, at {result.checkpoint.path}")


if __name__ == "__main__":
    main()
