"""Hydra launcher `hydra/launcher=backend_local|backend_render` (the default for those
backends): validates every point of a batch, then runs them one after another in this process.

`config.py` registers the config (imported by Hydra's plugin scan); `launcher.py` holds the
launcher, its trainstack imports deferred until a sweep runs.
"""
