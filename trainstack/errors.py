"""The Python API's exceptions: the classes the CLI's exit codes and the Training API's
status codes come from (jobs/errors.py), one hierarchy under `TrainstackError`, so a caller
catches broadly or narrowly.

    TrainstackError
    ├── ConfigError    (also a ValueError) bad input; `.key`, `.allowed`; nothing written
    ├── SubmitError    the backend or the API could not do what a valid request asked
    ├── RunNotFound    (also a LookupError) no such run id
    ├── RunFailed      a waited-for run failed or was cancelled; `.reason`, `.exit_code`,
    │                  `.log_tail`
    └── WaitTimeout    (also a TimeoutError) a wait ran past its timeout
"""

from __future__ import annotations

from jobs.errors import (
    ConfigError,
    RunFailed,
    RunNotFound,
    SubmitError,
    TrainstackError,
    WaitTimeout,
)

__all__ = [
    "ConfigError",
    "RunFailed",
    "RunNotFound",
    "SubmitError",
    "TrainstackError",
    "WaitTimeout",
]
