"""User-facing errors of `trainstack launch`: every one becomes a single line and exit 2."""

from __future__ import annotations

import difflib

from omegaconf import DictConfig

from jobs.config_path import user_config_dir

EXIT_BAD_INPUT = 2


class JobConfigError(ValueError):
    """Bad job config: `trainstack launch` prints it as one line and exits 2."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key = key


def one_line(err: BaseException) -> str:
    """A Hydra/OmegaConf composition error as `<key>: <problem>[; allowed: ...]`."""
    from hydra.errors import (
        InstantiationException,
        MissingConfigException,
    )  # lazy: hydra; the API's models read this module without it

    if isinstance(err, MissingConfigException) and err.missing_cfg_file:
        group, _, option = err.missing_cfg_file.rpartition("/")
        if group == "stack":
            return missing_stack(option, err.options)
        if group and err.options:
            return f"{group}: no option {option!r}; allowed: {', '.join(err.options)}"
    cause = err.__cause__ or err
    key = getattr(cause, "full_key", None) or getattr(err, "full_key", None)
    problem = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
    first = str(err).splitlines()[0] if str(err) else problem
    if key:
        if problem.startswith("Key ") and " not in " in problem:
            explain = getattr(getattr(cause, "object_type", None), "unknown_key", None)
            if explain is not None:  # a section that names its own keys (jobs/runners/)
                return f"{key}: {explain()}"
            near = nearest(str(key).rpartition(".")[2], getattr(cause, "parent_node", None))
            spell = f"did you mean {near!r}?" if near else "check the spelling;"
            return f"{key}: unknown key ({problem}); {spell} a new key is added with +{key}=..."
        return f"{key}: {problem}"
    if isinstance(err, InstantiationException) and err.__cause__ is not None:
        return problem  # a plugin's own refusal (hydra.launcher.*), not Hydra's wrapper line
    return first


def nearest(name: str, section: object) -> str | None:
    """The key of `section` (a DictConfig) closest to the mistyped `name`, if one is close."""
    if not isinstance(section, DictConfig):
        return None
    keys = [str(k) for k in section]
    found = difflib.get_close_matches(name, keys, n=1, cutoff=0.7)
    return found[0] if found else None


def missing_stack(name: str, options: list[str]) -> str:
    """A stack file is generated from the Pulumi stack's outputs: say how, and where to."""
    have = ", ".join(repr(o) for o in options) or "none"
    return (
        f"stack: no stack file {name!r} (options: {have}); write it with "
        f"`python -m infra.stack_defaults --stack {name}` after `pulumi up` (it goes to "
        f"{user_config_dir() / 'stack'}/, or a directory in $TRAINSTACK_CONFIG_PATH)"
    )


class BackendError(Exception):
    """A backend could not do what was asked; str() is the one line shown to the user. Here, not
    in jobs.backends, so the Kubernetes client (jobs.backends.kubernetes.client) raises it without
    importing backends."""
