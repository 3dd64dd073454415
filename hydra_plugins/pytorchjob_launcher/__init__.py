"""Hydra launcher `hydra/launcher=pytorchjob`: every point of a multirun becomes a PyTorchJob.

`config.py` registers the launcher's config (imported by Hydra's plugin discovery);
`launcher.py` holds the launcher, with its heavy imports deferred until a sweep runs.
"""
