"""Request and response bodies of the Training API (pydantic; unknown fields are refused).

A structured run request maps onto the same config keys a CLI user types (`to_overrides`), so
`POST /v1/runs {"model": "llama3_8b", "nodes": 4}` and `trainstack launch model=llama3_8b
compute.nodes=4` compose the same config.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from jobs.api.overrides import Labelled, Scalar, labelled_axis_overrides, override_value
from jobs.api.request_policy import MAX_SWEEP_POINTS, Refused
from jobs.runners import names as runner_names

FlagName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
"""A runner.args key: it becomes part of an override's key, so only a plain name passes."""
RunnerName = Literal[runner_names()]  # type: ignore[valid-type]
"""`runner=<name>`: the registry's runners (jobs/runners/)."""


MAX_MAP_ENTRIES = 64
"""Entries of `trainer` and `args`: each is an override Hydra composes under a lock every
request shares (6,500 args took 10 s to compose)."""
MAX_OVERRIDES = 100
"""Overrides one request may give (each costs composing time under the shared lock)."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LaunchFields(Strict):
    """The typed fields a run and a sweep share: each names one config key (`_field_overrides`),
    its value quoted (`override_value`), so a request's value is data, never grammar."""

    model: str | None = Field(None, description="model=<option>, e.g. llama3_8b")
    init_from: str | None = Field(
        None, description="model.init_from: a Hugging Face checkpoint to start from (dir or s3://)"
    )
    data: str | None = Field(None, description="data.path: the training JSONL (s3:// on a cluster)")
    compute: str | None = Field(None, description="compute=<instance type>, e.g. p5.48xlarge")
    nodes: int | None = Field(None, ge=1, description="compute.nodes")
    gpus_per_node: int | None = Field(None, ge=0, description="compute.gpus_per_node")
    image: str | None = Field(None, description="job.image (ECR tags are pinned to digests)")
    storage_root: str | None = Field(None, description="storage.root: run dirs go under it")
    trainer: dict[str, Scalar] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description="trainer.<key>=<value> overrides, e.g. max_steps",
    )
    runner: RunnerName | None = Field(
        None, description="runner=<name>: the built-in trainer, your command, or HF's Trainer"
    )
    command: list[str] | None = Field(
        None, max_length=100, description="runner.command (runner=command), e.g. [python, train.py]"
    )
    args: dict[FlagName, str | int | float | bool] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description="runner.args: appended to the command as --key=value",
    )


class _RunHead(Strict):
    """A run request's first fields (the order its `unknown field` refusal lists them in)."""

    overrides: list[str] = Field(
        default_factory=list,
        max_length=MAX_OVERRIDES,
        description="Hydra overrides as on the CLI, e.g. `trainer.lr=1e-3`; applied first. "
        "Only options of model, data, trainer, compute, experiment (plain names) and keys "
        "under model., data., trainer., compute., job. (not job.image_repository), eval., "
        "storage.root, "
        "run_id, sweep_id, seed; no `${...}` interpolations.",
    )
    run_id: str | None = Field(None, description="run_id; the same id resumes that run")


class RunRequest(LaunchFields, _RunHead):
    resume: bool = Field(
        True,
        description="An existing run with this run_id resumes from its latest checkpoint "
        "(true, the CLI's rule); false refuses with 409 instead.",
    )


class _SweepHead(Strict):
    overrides: list[str] = Field(
        default_factory=list,
        max_length=MAX_OVERRIDES,
        description="`launch -m` overrides, e.g. trainer.lr=1e-3,3e-3; applied first. "
        "At least one of overrides and axes.",
    )


class SweepRequest(LaunchFields, _SweepHead):
    axes: dict[str, Annotated[list[Scalar], Field(max_length=MAX_SWEEP_POINTS)]] = Field(
        default_factory=dict,
        max_length=MAX_MAP_ENTRIES,
        description='Swept config keys, each with its values: {"trainer.lr": [1e-3, 3e-3]} '
        "is the override trainer.lr=1e-3,3e-3 with every value quoted (a string's commas and "
        "quotes stay in it); the sweep is every combination. Keys as in overrides (a dotted "
        "key, no grammar).",
    )
    sweep_id: str | None = Field(None, description="re-using an id addresses the same runs")


def _field_overrides(request: LaunchFields, run_id: str | None = None) -> Labelled:
    """The typed fields' overrides: the one place a field becomes `key=value`."""
    pairs: list[tuple[str, str, Scalar]] = [
        ("run_id", "run_id", run_id),
        ("init_from", "model.init_from", request.init_from),
        ("data", "data.path", request.data),
        ("nodes", "compute.nodes", request.nodes),
        ("gpus_per_node", "compute.gpus_per_node", request.gpus_per_node),
        ("image", "job.image", request.image),
        ("storage_root", "storage.root", request.storage_root),
    ]
    groups = [(name, getattr(request, name)) for name in ("model", "compute", "runner")]
    out = [(name, f"{name}={value}") for name, value in groups if value]
    out += [(name, f"{key}={override_value(v)}") for name, key, v in pairs if v is not None]
    if request.command is not None:
        command = ",".join(override_value(a) for a in request.command)
        out.append(("command", f"runner.command=[{command}]"))
    for name, prefix, values in (
        ("args", "+runner.args", request.args),
        ("trainer", "trainer", request.trainer),
    ):
        out += [(f"{name}.{k}", f"{prefix}.{k}={override_value(v)}") for k, v in values.items()]
    return out


def _own(overrides: list[str]) -> Labelled:
    return [(f"overrides[{i}]", text) for i, text in enumerate(overrides)]


def labelled_overrides(request: RunRequest) -> Labelled:
    return [*_own(request.overrides), *_field_overrides(request, request.run_id)]


def to_overrides(request: RunRequest) -> list[str]:
    return [text for _, text in labelled_overrides(request)]


def labelled_sweep_overrides(request: SweepRequest) -> Labelled:
    """A sweep request's overrides: its own, its typed fields', then one `key=v1,v2,...` per
    axis. Raises Refused (one line naming the axis, or the value `axes.<key>[i]`) for a key
    that is not a plain dotted config key (it would be grammar: `=`, `,`, `+`, `~`, quotes
    ...), an axis with no value (the sweep would be 0 points, as `range(1,0)` in overrides is
    refused), or a value too long, not finite or past int64. An axis over a config group
    (`model`) takes option names, written unquoted (`model=llama3_8b,tiny`). What a key may
    set, the service's keys and the point cap are checked on these overrides as on any
    request's."""
    if not request.overrides and not request.axes:
        raise Refused("overrides, axes: a sweep needs at least one; allowed: either or both")
    axes = labelled_axis_overrides(request.axes)
    return [*_own(request.overrides), *_field_overrides(request), *axes]


def to_sweep_overrides(request: SweepRequest) -> list[str]:
    return [text for _, text in labelled_sweep_overrides(request)]


class Submitted(BaseModel):
    run_id: str
    outcome: str = Field(description="created, resumed, already active, or dryrun")
    plan: dict[str, Any]
    request: str | None = Field(None, description="the manifests (dryrun only)")


class SweepSubmitted(BaseModel):
    sweep_id: str
    runs: list[Submitted]


class Run(BaseModel):
    run_id: str
    state: str
    sweep_id: str | None
    nodes: int
    retries: int
    started_at: str | None
    finished_at: str | None
    last_step: int | None
    last_loss: float | None
    max_steps: int | None
    progress: float | None = Field(description="last_step / max_steps")
    instance_type: str | None
    hourly_usd: float | None = Field(description="catalog on-demand price of all nodes")
    cost_so_far_usd: float | None
    run_dir: str | None
    message: str
    owner: str | None = Field(None, description="who launched it (the token's user name)")


class RunList(BaseModel):
    runs: list[Run]


class Metrics(BaseModel):
    run_id: str
    records: list[dict[str, Any]]
    next_after_step: int | None = Field(
        None, description="more records follow: ask again with after_step=<this>"
    )


class Eval(BaseModel):
    checkpoint: str = Field(description="folder under eval/: step-<8 digits>[-endpoint]")
    step: int
    via: str = Field(description="export (lm-eval's hf model) or endpoint (local-completions)")
    scores: dict[str, dict[str, float]] = Field(
        description="task -> lm-eval metric (`acc,none`, `exact_match,strict-match`) -> value"
    )
    error: str | None = Field(None, description="why results.json could not be read")


class Evals(BaseModel):
    run_id: str
    evals: list[Eval] = Field(description="by step, at most 256 (the newest)")


class Cancelled(BaseModel):
    run_id: str
    state: str
    outcome: str = Field(description="cancel requested, or already <state>")


class Problem(BaseModel):
    detail: str
