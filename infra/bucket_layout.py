"""The runs bucket's layout: one owner per top-level prefix, and what each pod role may do there.

    runs/        run dirs (checkpoints, metrics)  training: read-write
    datasets/    prepared token shards            data-prepare: read-write; training: read
    models/      Hugging Face checkpoints         pods: read (exports, Hub downloads write)
    tokenizers/  Hugging Face tokenizers          pods: read (Hub downloads write)
    raw/         raw corpora (JSONL, zst)         pods: read (people upload)

`models/`, `tokenizers/` and `raw/` are written by people with their own credentials
(`trainstack export --to s3://<bucket>/models/...`, a Hub download, `aws s3 cp`): no pod can
overwrite a base model or a corpus. Extra buckets or prefixes come from `trainstack:dataAccess`
and apply to both pod roles. Pure: infra builds policies from it, and the stack outputs publish it
as `s3_grants` for jobs to check URLs at launch (jobs/grants.py).
"""

from __future__ import annotations

from dataclasses import dataclass

READ = "read"
READWRITE = "readwrite"
ACCESS_LEVELS = (READ, READWRITE)

RUNS = "runs"
DATASETS = "datasets"
MODELS = "models"
TOKENIZERS = "tokenizers"
RAW = "raw"
LAYOUT_PREFIXES = (RUNS, DATASETS, MODELS, TOKENIZERS, RAW)

TRAINING = "training"
DATA_PREPARE = "data_prepare"
POD_ROLES = (TRAINING, DATA_PREPARE)
POD_ACCESS: dict[str, dict[str, str]] = {
    TRAINING: {RUNS: READWRITE, DATASETS: READ, MODELS: READ, TOKENIZERS: READ, RAW: READ},
    DATA_PREPARE: {DATASETS: READWRITE, RAW: READ, MODELS: READ, TOKENIZERS: READ},
}


@dataclass(frozen=True)
class Grant:
    """`access` to `s3://<bucket>/<prefix>/` (prefix "" is the whole bucket)."""

    bucket: str
    prefix: str
    access: str
    kms_key_arn: str | None = None
    """The key that encrypts the objects (SSE-KMS buckets other than the stack's)."""

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}/" if self.prefix else f"s3://{self.bucket}/"

    def published(self) -> dict[str, str]:
        return {"url": self.url, "access": self.access}


def pod_grants(role: str, bucket: str, extra: tuple[Grant, ...] = ()) -> list[Grant]:
    """Every grant of one pod role: its share of the layout in `bucket`, then `extra`."""
    own = [Grant(bucket, prefix, access) for prefix, access in POD_ACCESS[role].items()]
    return own + list(extra)


def published_grants(bucket: str, extra: tuple[Grant, ...] = ()) -> dict[str, list[dict]]:
    """The `s3_grants` stack output: role -> [{url, access}]."""
    return {role: [g.published() for g in pod_grants(role, bucket, extra)] for role in POD_ROLES}
