"""Declarative jobs: compose a Hydra config, validate it, materialize it, run it somewhere.

`compose` -> `validate_job` -> `to_job_spec` (+ `kubernetes_job` for pods) -> `to_manifests`
are pure functions; backends
(`local`, `render`, `kubernetes`) are thin adapters behind `jobs.backends.base.Backend`.
Kept import-light: heavy clients load only in the modules that talk to them.
"""
