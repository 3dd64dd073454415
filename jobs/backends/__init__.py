"""The backends' homes: one package per backend (`local`, `render`, `kubernetes`), the interface
they implement (`base`) and the run dir state the local and rendered runs keep (`run_state`).

All of this folder stands on one floor, above the launch pipeline (pyproject's jobs floors):
what the pipeline reads of a backend, the table of backends and their traits, is
jobs.backend_registry, on the floor below it, which imports a home only by name when asked.
"""
