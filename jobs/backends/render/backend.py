"""The render backend: kubectl-applyable YAML under `<backend.output_root>/<run_id>/`. `kubectl
apply -f <path>` submits what `backend=kubernetes` would: an ECR image tag is pinned to its digest
as the kubernetes backend pins it at submit (jobs/backends/kubernetes/client/ecr.py; one read-only
DescribeImages with this user's credentials), or, where it cannot be resolved from here (no
credentials or network), kept with one line saying so. No cluster is contacted, and no clock is
read: the same config renders byte-identical files (GitOps diffs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contract.run_dir import CODE_DIR
from jobs.backends import run_state
from jobs.backends.base import RENDERED, BackendError, DryRun, RunStatus, matching
from jobs.backends.kubernetes.client.ecr import ECR_IMAGE, pin_images, resolve_digest
from jobs.backends.kubernetes.manifest_checks import JOBS_EXTRA, schemas_installed
from jobs.backends.kubernetes.manifests import to_yaml
from jobs.materialize import MaterializedJob

MANIFEST_FILE = "manifests.yaml"


_PINNED: dict[str, str] = {}
"""Image -> what renders carry (its digest, or the tag when it could not be resolved): asked
once per process, so a sweep's points make one request."""
ECR_TIMEOUTS = {"connect_timeout": 3, "read_timeout": 10, "retries": {"max_attempts": 1}}


def digest_or_tag(image: str) -> str:
    """The kubernetes backend's pin (jobs.backends.kubernetes.client.ecr.resolve_digest), or the tag
    kept, once with a one-line note, when ECR cannot be asked from here."""
    if image in _PINNED:
        return _PINNED[image]

    match = ECR_IMAGE.match(image)
    if match is None:  # another registry, or already a digest: rendered as given
        _PINNED[image] = image
        return image
    try:
        import boto3  # lazy: start-up (boto3)
        from botocore.config import Config  # lazy: start-up (boto3)

        client = boto3.client("ecr", region_name=match["region"], config=Config(**ECR_TIMEOUTS))
        _PINNED[image] = resolve_digest(image, client)
    except Exception as err:  # ClusterError, or boto3's: no credentials, no network
        cause = err.__cause__ or err
        reason = " ".join(str(cause).split()) or type(cause).__name__
        print(
            f"render: job.image {image}: kept as its tag, not pinned to a digest ({reason}); "
            "backend=kubernetes pins it at submit",
            flush=True,  # stdout, with the plan's warnings: a note, not an error
        )
        _PINNED[image] = image
    return _PINNED[image]


class RenderBackend:
    name = "render"

    def __init__(self, output_root: str = "runs"):
        self.output_root = Path(output_root)

    @classmethod
    def from_config(cls, cfg: Any, shared: Any = None) -> RenderBackend:
        """`shared` is unused: its instances share nothing."""
        return cls(output_root=cfg.backend.output_root)

    def manifest_path(self, run_id: str) -> Path:
        return self.output_root / run_id / MANIFEST_FILE

    def dryrun(self, job: MaterializedJob) -> DryRun:
        if job.manifests is None:
            raise BackendError("render: the job was materialized without manifests")
        manifests = pin_images(job.manifests, resolve=digest_or_tag)
        if not schemas_installed():
            print(
                "render: not checked against Kubernetes' JSON schemas (the webhooks' and pod "
                f"security checks ran); for that: {JOBS_EXTRA}",
                flush=True,
            )
        text = to_yaml(manifests)
        return DryRun(
            backend=self.name,
            job=job,
            request=manifests,
            text=text,
            extra={"path": str(self.manifest_path(job.run_id))},
        )

    def schedule(self, dryrun: DryRun) -> str:
        job = dryrun.job
        path = self.manifest_path(job.run_id)
        self._store_code(job, path.parent)  # the pods fetch it: there before the manifests
        try:
            self._write(job, path, dryrun.text)
        except OSError as err:  # validation saw a writable root; the disk said otherwise
            raise BackendError(
                f"backend.output_root: cannot write {path} ({err.strerror or err}); allowed: "
                "a directory this user can create or write"
            ) from err
        return job.run_id

    def _store_code(self, job: MaterializedJob, local_dir: Path) -> None:
        """The workdir archive into the run dir, as every backend stores it; where that cannot
        be done from here (no AWS credentials), beside the manifests, with the one command
        that uploads it to where the pods fetch it (before `kubectl apply`)."""
        try:
            job.store_code()
        except BackendError as err:
            if job.code is None or job.spec.code is None:
                raise
            uri = job.spec.code.uri
            local = local_dir / CODE_DIR / uri.rsplit("/", 1)[1]
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(job.code.data)
            reason = str(err.__cause__ or err).rsplit(": ", 1)[-1]
            print(
                f"render: runner.workdir not stored at {uri} ({reason}); before kubectl "
                f"apply: aws s3 cp {local} {uri}",
                flush=True,
            )

    def _write(self, job: MaterializedJob, path: Path, text: str) -> None:
        run_state.write_atomic(path, text)
        now = run_state.utc_now()
        run_state.write_state(
            path.parent,
            {
                "run_id": job.run_id,
                "sweep_id": job.spec.labels.get("trainstack.io/sweep-id"),
                "backend": self.name,
                "state": RENDERED,
                "nodes": job.spec.nodes,
                "run_dir": job.spec.run_dir,
                "manifests": str(path),
                "started_at": now,
                "finished_at": now,
                "estimated_cost_usd": job.plan.cost_usd,
            },
        )

    def status(self, run_id: str) -> RunStatus:
        state = run_state.read_state(self.output_root / run_id)
        if state is None or state.get("backend") != self.name:
            raise BackendError(f"no rendered run {run_id!r} under {self.output_root}/")
        return run_state.to_status(self.output_root / run_id, state)

    def list_runs(self, sweep_id: str | None = None, state: str | None = None) -> list[RunStatus]:
        runs = [
            run_state.to_status(d, s) for d, s in run_state.list_states(self.output_root, self.name)
        ]
        return matching(runs, sweep_id, state)

    def logs(self, run_id: str, rank: int = 0, follow: bool = False) -> Iterator[str]:
        self.status(run_id)
        raise BackendError(
            f"run {run_id} was rendered, not run: apply {self.manifest_path(run_id)} and use "
            "backend=kubernetes for logs"
        )

    def cancel(self, run_id: str) -> None:
        """Nothing runs, so nothing to stop (idempotent by construction)."""


BACKEND = RenderBackend
