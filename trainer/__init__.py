"""trainstack's trainer: the FSDP2 program every job runs.

Importing this package must stay cheap and torch-free: `jobs` reads `contract.model.args` to
plan and validate jobs without loading torch (the config schema is `contract.config`).
"""
