"""User-facing errors: every one is a single line. The classes are the one place the CLI's
exit code and the Training API's status for each kind of failure are written
(`exit_code`, `http_status`); the Python API (`trainstack.errors`) raises the same classes,
and its HTTP client turns a status back into the class that has it (`for_status`)."""

from __future__ import annotations

import difflib

from contract.config import EXIT_BAD_INPUT as BAD_INPUT
from contract.config import EXIT_FAILED
from jobs.config_path import user_config_dir

ALLOWED = "; allowed: "
"""How a one-line refusal names what is allowed (`<key>: <problem>; allowed: ...`)."""


class TrainstackError(Exception):
    """Any failure trainstack reports to a user: str() is its one line."""

    exit_code: int = EXIT_FAILED
    """The CLI's exit status for this kind of failure."""
    http_status: int = 500
    """The Training API's status for it."""


class ConfigError(TrainstackError, ValueError):
    """Bad input (an override, a value, a key the service owns): nothing was written or
    submitted. `.key` names it, `.allowed` what it may be (None where the line says nothing);
    the CLI prints the line and exits 2, the API answers 422 with it."""

    exit_code: int = BAD_INPUT
    http_status: int = 422

    def __init__(self, line: str, key: str | None = None):
        super().__init__(line)
        head, colon, _ = str(self).partition(": ")
        self.key = key or (head if colon and " " not in head else None)
        _, found, allowed = str(self).partition(ALLOWED)
        self.allowed = allowed if found else None


class SubmitError(TrainstackError):
    """The backend could not do what a valid request asked (the cluster refused or could not
    be reached, the run is already running)."""

    http_status: int = 409


class RunNotFound(TrainstackError, LookupError):
    """No backend (or the Training API) knows the run id."""

    http_status: int = 404

    def __init__(self, line: str, run_id: str | None = None):
        super().__init__(line)
        self.run_id = run_id


class RunFailed(TrainstackError):
    """A waited-for run ended without succeeding (failed or cancelled): its state, the
    reason its backend gives, its exit code (the CLI exits with it) and the end of its log."""

    def __init__(
        self,
        run_id: str,
        state: str,
        reason: str = "",
        exit_code: int | None = None,
        log_tail: tuple[str, ...] = (),
    ):
        code = "" if exit_code is None else f", exit code {exit_code}"
        because = f": {reason}" if reason else ""
        super().__init__(f"run {run_id} {state}{code}{because}")
        self.run_id, self.state, self.reason = run_id, state, reason
        self.exit_code = exit_code if exit_code else EXIT_FAILED
        self.log_tail = log_tail


class WaitTimeout(TrainstackError, TimeoutError):
    """A wait ran past its timeout; the run goes on (wait again, or cancel it)."""

    exit_code: int = 124  # timeout(1)'s
    http_status: int = 504


def for_status(status: int) -> type[TrainstackError]:
    """The class the Training API's `status` stands for (the HTTP client raises it)."""
    for kind in (ConfigError, RunNotFound, WaitTimeout):
        if kind.http_status == status:
            return kind
    return SubmitError


EXIT_BAD_INPUT = ConfigError.exit_code


class JobConfigError(ConfigError):
    """Bad job config: `trainstack launch` prints it as one line and exits 2."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}", key=key)


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
    from omegaconf import DictConfig  # lazy: 0.2 s of `import trainstack` (its errors are these)

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
    in jobs.backends.base, so the Kubernetes client (jobs.backends.kubernetes.client) raises it
    without importing backends."""
