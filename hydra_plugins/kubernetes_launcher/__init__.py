"""Hydra launcher `hydra/launcher=kubernetes` (aliases `trainjob`, `pytorchjob`): every point of
a multirun becomes a TrainJob or PyTorchJob (`job.api`).

`config.py` registers the launcher's config (imported by Hydra's plugin discovery);
`launcher.py` holds the launcher, with its heavy imports deferred until a sweep runs.
"""
