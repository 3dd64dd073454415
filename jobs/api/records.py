"""What the service reads of a run to decide on a request naming it: the run ids an input path
under the storage root names (the owner rule on inputs), and the record the cluster keeps of
the run (its ConfigMap), which a relaunch keeps to (the CLI's rule: jobs.relaunch)."""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from jobs import submission
from jobs.backends.kubernetes.backend import MANAGED_SELECTOR
from jobs.backends.kubernetes.manifests import config_map_name
from jobs.errors import JobConfigError, one_line
from jobs.materialize import MaterializedJob, materialize
from jobs.plot.metrics import parse_config
from jobs.relaunch import relaunch_config, trainer_sections
from jobs.spec import CONFIG_FILE


def runs_named(path: str, root: str) -> set[str]:
    """The run ids a path under the storage root names (its first part below the root), both
    as written and as normalized (`..`, `.`, `//`: S3 keys are literal, a local path or a
    client may fold them), so no spelling of another run's dir reads as outside it; a local
    path also as resolved (symlinks)."""
    remote = "://" in root or "://" in path

    def parts(text: str) -> list[str]:
        scheme, _, rest = text.rpartition("://")
        return [scheme, *rest.split("/")]

    spellings = [path, posixpath.normpath(path) if not remote else _normalized(path)]
    if not remote:
        spellings.append(str(Path(path).resolve()))
        roots = [root, str(Path(root).resolve())]
    else:
        roots = [root]
    found = set()
    for spelled in spellings:
        for base in roots:
            head, here = parts(base.rstrip("/")), parts(spelled)
            if here[: len(head)] == head and len(here) > len(head):
                found.add(here[len(head)])
    return found - {"", ".", ".."}


def _normalized(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{posixpath.normpath('/' + rest).lstrip('/')}"


_MANAGED = dict([MANAGED_SELECTOR.split("=", 1)])


def cluster_record(cluster: Any, run_id: str) -> tuple[str, dict] | None:
    """(where, the trainer sections of) the run's ConfigMap (the trainer's `--config`, as
    jobs.relaunch reads a local run's record), or None when there is none, it is not
    trainstack's, or it is no config (read as a run dir's config.yaml is: bounded)."""
    name = config_map_name(run_id)
    found = cluster.call_or_none(
        f"get ConfigMap {cluster.namespace}/{name}",
        cluster.core.read_namespaced_config_map,
        name,
        cluster.namespace,
    )
    labels = (found.metadata.labels or {}) if found is not None else {}
    if found is None or not _MANAGED.items() <= labels.items():
        return None  # not trainstack's: the run check refuses the run id (409)
    text = (found.data or {}).get(CONFIG_FILE)
    record = parse_config(text) if isinstance(text, str) else {}
    return (f"ConfigMap {name}", trainer_sections(record)) if record else None


def relaunched(
    job: MaterializedJob,
    request_overrides: list[str],
    cluster: Any,
    composing: Callable[[], AbstractContextManager],
) -> MaterializedJob:
    """The job of a request naming an existing run: the CLI's relaunch rule
    (jobs.relaunch `relaunch_config`) on the record the cluster keeps (`cluster_record`), so
    the run keeps its model, data and layout as recorded and a typed key that would change
    them raises BadInput naming it; `job` unchanged without a record. `composing()` is held
    around any composition (the service's shared Hydra lock)."""
    record = cluster_record(cluster, job.run_id)
    if record is None:
        return job
    cfg = copy.deepcopy(job.cfg)
    OmegaConf.set_readonly(cfg, False)
    # The CLI leaves a multirun's points (sweep_id set) to their launcher; the API holds its
    # sweeps' points, and a run request setting `sweep_id=`, to the rule all the same.
    sweep_id, cfg.sweep_id = cfg.sweep_id, None
    try:
        cfg, where = relaunch_config(cfg, request_overrides, found=record, composing=composing)
        if where is None:
            return job
        cfg.sweep_id = sweep_id
        return materialize(cfg, now=submission.utc_now(), git_sha=submission.git_sha())
    except (HydraException, OmegaConfBaseException) as err:
        raise submission.BadInput(one_line(err)) from err
    except (JobConfigError, *submission.refusals()) as err:
        raise submission.BadInput(str(err)) from err
