"""Where metrics go (rank 0 only): `<run_dir>/logs/metrics.jsonl`, the console, and optional
TensorBoard / W&B / MLflow when installed and configured.

The console shows a rich progress bar in a terminal and plain lines otherwise (pod logs, CI).
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

from contract.config import MetricsConfig
from contract.run_dir import METRICS_FILE
from trainer.errors import warn
from trainer.storage import RunStorage, StorageError


class MetricsLogger:
    """Records go to metrics.jsonl as they come. A write that fails (storage down past its
    retries) does not end the run: the record is kept and written with the next one (or at
    `close`), one warning when writes start failing and one line when they work again; an
    abandoned checkpoint's event, logged while S3 is down, is the likeliest such record."""

    def __init__(
        self,
        storage: RunStorage,
        cfg: MetricsConfig,
        *,
        enabled: bool,
        first_step: int,
        total_steps: int,
        run_config: dict[str, Any],
    ):
        self.storage, self.enabled = storage, enabled
        self._unwritten: list[str] = []
        """Lines a failed write left over, written first by the next one."""
        self._sinks: list[Any] = []
        self._progress = None
        self._latest: dict[str, Any] = {}
        if not enabled:
            return
        if sys.stdout.isatty():
            from rich.progress import Progress  # lazy: rich, on a terminal only

            self._progress = Progress(*Progress.get_default_columns(), "{task.fields[info]}")
            self._task = self._progress.add_task(
                "train", total=total_steps, completed=first_step, info=""
            )
            self._progress.start()
        self._sinks = _external_sinks(cfg, storage, run_config)

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._append(json.dumps(record) + "\n")
        step = record["step"]
        numbers = {k: v for k, v in record.items() if isinstance(v, int | float) and k != "step"}
        for sink in self._sinks:
            sink(numbers, step)
        # The file keeps every key; the log line only what has a value (mfu/percent is null
        # where the device's peak is unknown, e.g. on CPU).
        line = " ".join(f"{k}={_short(v)}" for k, v in record.items() if v is not None)
        if self._progress is not None:
            self._latest.update(record)  # an eval line keeps the last training figures shown
            self._progress.update(self._task, completed=step, info=_headline(self._latest))
        else:
            print(f"[trainer] {line}", flush=True)

    def note(self, message: str) -> None:
        """A one-off line (start-up summary, resume, checkpoint)."""
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(f"[trainer] {message}")
        else:
            print(f"[trainer] {message}", flush=True)

    def _append(self, line: str) -> bool:
        """Write the kept lines, then `line`; True when they are on storage."""
        lines = [*self._unwritten, line] if line else self._unwritten
        if not lines:
            return True
        try:
            self.storage.append_text(METRICS_FILE, "".join(lines))
        except StorageError as exc:
            if not self._unwritten:
                warn(f"{exc}; metrics records are kept and written with the next one")
            self._unwritten = lines
            return False
        if self._unwritten:
            self.note(f"{METRICS_FILE} written again ({len(self._unwritten)} records late)")
        self._unwritten = []
        return True

    def close(self) -> None:
        if self._unwritten:
            kept = len(self._unwritten)
            if not self._append(""):
                warn(f"{kept} metrics records never reached {self.storage.uri(METRICS_FILE)}")
        if self._progress is not None:
            self._progress.stop()
        for sink in self._sinks:
            close = getattr(sink, "close", None)
            if close:
                close()


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def _headline(record: dict[str, Any]) -> str:
    keys = ("loss", "eval_loss", "lr", "throughput/tokens_per_s")
    return " ".join(f"{k}={_short(record[k])}" for k in keys if record.get(k) is not None)


def _external_sinks(cfg: MetricsConfig, storage: RunStorage, run_config: dict[str, Any]) -> list:
    sinks: list[Any] = []
    if cfg.tensorboard:
        sinks += _tensorboard(storage)
    if cfg.wandb_project:
        sinks += _wandb(cfg.wandb_project, run_config)
    if cfg.mlflow_tracking_uri:
        sinks += _mlflow(cfg.mlflow_tracking_uri, run_config)
    return sinks


class _Sink:
    def __init__(self, write, close=None):
        self._write, self.close = write, close

    def __call__(self, numbers: dict[str, float], step: int) -> None:
        self._write(numbers, step)


def _tensorboard(storage: RunStorage) -> list[_Sink]:
    try:
        from torch.utils.tensorboard import SummaryWriter  # lazy: optional; absent: a warning
    except ImportError:
        warn("trainer.metrics.tensorboard is on but `tensorboard` is not installed; skipped")
        return []
    local = storage.local_path("logs/tensorboard")
    if local is None:
        warn("trainer.metrics.tensorboard: only local run dirs are supported; skipped")
        return []
    writer = SummaryWriter(str(local))

    def write(numbers: dict[str, float], step: int) -> None:
        for key, value in numbers.items():
            writer.add_scalar(key, value, step)

    return [_Sink(write, writer.close)]


def _wandb(project: str, run_config: dict[str, Any]) -> list[_Sink]:
    try:
        import wandb  # lazy: optional; absent: a warning
    except ImportError:
        warn("trainer.metrics.wandb_project is set but `wandb` is not installed; skipped")
        return []
    # Offline runs (synced later with `wandb sync`) need no account; online ones do, and
    # without a key wandb would stop to prompt for a login on a pod with no one to answer.
    offline = os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun", "disabled")
    if not offline and not os.environ.get("WANDB_API_KEY"):
        warn(
            "trainer.metrics.wandb_project is set but WANDB_API_KEY is not "
            "(set it, or WANDB_MODE=offline); skipped"
        )
        return []
    try:
        run = wandb.init(project=project, config=run_config)
    except wandb.errors.Error as exc:  # e.g. a rejected key; skipped like MLflow's failures
        warn(f"trainer.metrics.wandb_project={project!r}: {exc}; skipped")
        return []
    return [_Sink(lambda numbers, step: run.log(numbers, step=step), run.finish)]


def _mlflow(uri: str, run_config: dict[str, Any]) -> list[_Sink]:
    try:
        import mlflow  # lazy: optional; absent: a warning
    except ImportError:
        warn("trainer.metrics.mlflow_tracking_uri is set but `mlflow` is not installed; skipped")
        return []
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.start_run()
    except mlflow.exceptions.MlflowException as exc:
        # e.g. an unreachable server, or MLflow 3 refusing a `file:` store unless
        # MLFLOW_ALLOW_FILE_STORE=true. Only rank 0 gets here, so failing the job would leave the
        # other ranks to die on a broken collective; metrics.jsonl still has every figure.
        warn(f"trainer.metrics.mlflow_tracking_uri={uri!r}: {exc.message}; skipped")
        return []
    mlflow.log_dict(run_config, "config.json")
    return [_Sink(lambda numbers, step: mlflow.log_metrics(numbers, step=step), mlflow.end_run)]
