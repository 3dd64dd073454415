"""Overrides -> validated, materialized job, raising instead of printing: the one way to make
a job, shared by `trainstack launch` and the Training API (jobs/api/).

Bad input raises `BadInput` whose str() is the one line the CLI prints after
`trainstack launch: ` and the API returns with 422. Nothing is written or started here.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from jobs.backend_registry import NAMES, hook, traits_of
from jobs.compose import compose
from jobs.errors import ConfigError, JobConfigError, one_line
from jobs.materialize import MaterializedJob, materialize

REPO_DIR = Path(__file__).resolve().parent.parent
GIT_SHA_ENV = "TRAINSTACK_GIT_SHA"
"""The commit an installed copy (the API image) was built from, where there is no checkout."""


class BadInput(ConfigError):
    """Composition or validation refused the overrides; str() is one line naming the key
    (the CLI exits `exit_code`, the API answers `http_status`: jobs.errors.ConfigError)."""


def utc_now() -> datetime:
    """The clock jobs are stamped with (one place, so tests can fix it)."""
    return datetime.now(UTC)


@cache
def git_sha(repo: Path = REPO_DIR) -> str | None:
    """HEAD of the checkout the job is launched from (labels; default image tag), else
    $TRAINSTACK_GIT_SHA. Asked once per process: every point of a sweep run by a Hydra
    launcher calls it, and all of them must carry the SHA the sweep was validated with."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return os.environ.get(GIT_SHA_ENV) or None


def refusals() -> tuple[type[Exception], ...]:
    """The errors the backends' manifest checks raise on bad input (one line each), through
    their traits; asked only when something was raised (Python evaluates an `except` clause
    then), so a launch that raises nothing imports no backend's checks."""
    sides = (traits_of(name).cluster for name in NAMES)
    return tuple(dict.fromkeys(hook(side.refusal) for side in sides if side is not None))


def prepare(
    overrides: Sequence[str],
    *,
    now: datetime | None = None,
    compose_lock: AbstractContextManager | None = None,
) -> MaterializedJob:
    """compose -> validate -> materialize; raises BadInput (one line) on bad input.

    `compose_lock` is held around composition alone (Hydra's state is process-global); the
    checks after it may wait on the network (S3, the Hub) and hold nobody else up."""
    try:
        with compose_lock or nullcontext():
            cfg = compose(list(overrides))
        return materialize(cfg, now=now or utc_now(), git_sha=git_sha())
    except (HydraException, OmegaConfBaseException) as err:
        raise BadInput(one_line(err)) from err
    except (JobConfigError, *refusals()) as err:
        raise BadInput(str(err)) from err
