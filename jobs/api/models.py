"""Request and response bodies of the Training API (pydantic; unknown fields are refused).

A structured run request maps onto the same config keys a CLI user types (`to_overrides`), so
`POST /v1/runs {"model": "llama3_8b", "nodes": 4}` and `trainstack launch model=llama3_8b
compute.nodes=4` compose the same config.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from jobs.api.request_policy import KEY, MAX_SWEEP_POINTS, Refused, _shown
from jobs.runners import names as runner_names

Scalar = str | int | float | bool | None
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
        "under model., data., trainer., compute., job. (not job.image_repository), storage.root, "
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


_ESCAPED = re.compile(r"(\\*)('|\Z)")
"""A run of backslashes before a quote or the end of the string."""


def _escape(match: re.Match) -> str:
    return match[1] * 2 + ("\\'" if match[2] else "")


def override_value(value: Scalar) -> str:
    """A value in Hydra's override grammar: strings quoted (any character survives)."""
    if isinstance(value, str):
        # Hydra reads backslashes as escapes only in a run of them before a quote or the
        # closing quote (facebookresearch/hydra v1.3.8, hydra/grammar/OverrideLexer.g4,
        # QUOTED_VALUE): only those runs are doubled; any other backslash stays as it is.
        return "'" + _ESCAPED.sub(_escape, value) + "'"
    return json.dumps(value)  # true/false/null and numbers read the same in Hydra


def _field_overrides(request: LaunchFields, run_id: str | None = None) -> list[str]:
    """The typed fields' overrides: the one place a field becomes `key=value`."""
    pairs: list[tuple[str, Scalar]] = [
        ("run_id", run_id),
        ("model.init_from", request.init_from),
        ("data.path", request.data),
        ("compute.nodes", request.nodes),
        ("compute.gpus_per_node", request.gpus_per_node),
        ("job.image", request.image),
        ("storage.root", request.storage_root),
    ]
    groups = [f"model={request.model}"] if request.model else []
    groups += [f"compute={request.compute}"] if request.compute else []
    groups += [f"runner={request.runner}"] if request.runner else []
    values = [f"{key}={override_value(v)}" for key, v in pairs if v is not None]
    if request.command is not None:
        values.append(f"runner.command=[{','.join(override_value(a) for a in request.command)}]")
    values += [f"+runner.args.{k}={override_value(v)}" for k, v in request.args.items()]
    trainer = [f"trainer.{k}={override_value(v)}" for k, v in request.trainer.items()]
    return [*groups, *values, *trainer]


def to_overrides(request: RunRequest) -> list[str]:
    return [*request.overrides, *_field_overrides(request, request.run_id)]


def to_sweep_overrides(request: SweepRequest) -> list[str]:
    """A sweep request's overrides: its own, its typed fields', then one `key=v1,v2,...` per
    axis. Raises Refused (one line naming the axis) for a key that is not a plain dotted config
    key (it would be grammar: `=`, `,`, `+`, `~`, quotes ...) or an axis with no value (the
    sweep would be 0 points, as `range(1,0)` in overrides is refused); what a key may set, the
    service's keys and the point cap are checked on these overrides as on any request's."""
    if not request.overrides and not request.axes:
        raise Refused("overrides, axes: a sweep needs at least one; allowed: either or both")
    axes = []
    for key, values in request.axes.items():
        if not KEY.match(key):
            raise Refused(
                f"axes: {_shown(key)} is not a config key; allowed: a dotted key "
                "(letters, digits, _ and . only, e.g. trainer.lr)"
            )
        if not values:
            raise Refused(f"axes.{key}: no value; allowed: a list of one or more values")
        axes.append(f"{key}={','.join(override_value(v) for v in values)}")
    return [*request.overrides, *_field_overrides(request), *axes]


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


class Cancelled(BaseModel):
    run_id: str
    state: str
    outcome: str = Field(description="cancel requested, or already <state>")


class Problem(BaseModel):
    detail: str
