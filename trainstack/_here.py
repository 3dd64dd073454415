"""`Here`: the place that answers in this process, through the CLI's own functions
(jobs.inprocess). Loaded by `trainstack` by name on the first call that needs it, so that
`import trainstack` loads neither Hydra, torch nor a Kubernetes client."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobs import inprocess
from jobs.backends.base import RunStatus as BackendStatus
from jobs.errors import ConfigError
from jobs.python_program import program_overrides
from trainstack._run import Run, RunStatus, Sweep


def to_status(status: BackendStatus) -> RunStatus:
    return RunStatus(
        run_id=status.run_id,
        state=status.state,
        backend=status.backend,
        step=status.last_step,
        loss=status.last_loss,
        retries=status.retries,
        restarts=status.restarts,
        exit_code=status.exit_code,
        reason=status.message,
        sweep_id=status.sweep_id,
        started_at=status.started_at,
        finished_at=status.finished_at,
        run_dir=status.run_dir,
        owner=status.owner,
        log_ranks=status.log_ranks,
    )


@dataclass(frozen=True)
class Here:
    """Runs as this machine's CLI sees them, `where` (overrides such as `stack=prod`)
    selecting the stack and cluster; `backend`: only that backend's runs."""

    where: tuple[str, ...] = ()
    backend: str | None = None

    def submit(
        self, overrides: Sequence[str], values: Mapping[str, Any] | None, **options: Any
    ) -> Run:
        dryrun = options.pop("dryrun", False)
        wait = options.get("wait", False)
        program = options.pop("program", None)
        args, workdir = options.pop("args", None), options.pop("workdir", None)
        if program is None and (args is not None or workdir is not None):
            raise ConfigError("args, workdir: only with program=; allowed: None", key="args")
        ran = [] if program is None else program_overrides(program, args, workdir)
        args = inprocess.launch_overrides([*self.where, *ran, *overrides], values, **options)
        launched = inprocess.launch(args, dryrun=dryrun)
        run = self._handle(launched)
        if wait and not dryrun:
            run.wait()
        return run

    def _handle(self, launched: inprocess.Launched) -> Run:
        job = launched.job
        return Run(
            job.run_id,
            Here(self.where, job.cfg.backend.name),
            plan=job.plan.summary(),
            request=str(launched.request),
            submitted=launched.submitted,
            _config=inprocess.plain(job.cfg),
        )

    def submit_sweep(
        self,
        overrides: Sequence[str],
        values: Mapping[str, Any] | None,
        axes: Mapping[str, Sequence[Any]],
        sweep_id: str | None,
    ) -> Sweep:
        swept = inprocess.sweep_axes(axes)
        args = inprocess.launch_overrides([*self.where, *overrides], values)
        sweep_id, points = inprocess.sweep([*args, *swept], sweep_id)
        runs = [self._handle(point) for point in points]
        table = [
            {key: _select(run.config, key) for key in axes}
            for run in runs  # each point's values as its composed config holds them
        ]
        return Sweep(sweep_id, runs, table)

    def _backends(self) -> list[Any]:
        return inprocess.where_backends(self.where, self.backend)

    def _found(self, run_id: str) -> tuple[Any, Any]:
        return inprocess.find(run_id, self._backends())

    def find(self, run_id: str) -> Run:
        backend, _ = self._found(run_id)
        return Run(run_id, Here(self.where, backend.name))

    def listed(self, sweep: str | None, state: str | None) -> list[Run]:
        found = inprocess.list_runs(self._backends(), sweep, state)
        return [Run(s.run_id, Here(self.where, b.name)) for b, s in found]

    def status(self, run_id: str) -> RunStatus:
        return to_status(self._found(run_id)[1])

    def logs(self, run_id: str, rank: int, follow: bool) -> Iterator[str]:
        backend, status = self._found(run_id)
        ranks = status.log_ranks
        if ranks is not None and not 0 <= rank < ranks:  # the CLI's `logs --rank` check
            has = "rank 0 only" if ranks == 1 else f"ranks 0-{ranks - 1}"
            raise ConfigError(f"rank: {rank}: run {run_id} has {has}", key="rank")
        return inprocess.logs(backend, run_id, rank, follow)

    def metrics(self, run_id: str, run_dir: str | None) -> list[dict[str, Any]]:
        return inprocess.metrics(run_id, run_dir)

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        return inprocess.checkpoints(run_id, self.where)

    def export(self, run_id: str, to: str, **options: Any) -> Any:
        return inprocess.export(run_id, self.where, to, **options)

    def cancel(self, run_id: str) -> None:
        backend, _ = self._found(run_id)
        backend.cancel(run_id)

    def config(self, run_id: str) -> dict[str, Any] | None:
        return inprocess.recorded_config(run_id, self.where)


def _select(config: dict[str, Any] | None, key: str) -> Any:
    node: Any = config
    for name in key.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(name)
    return node
