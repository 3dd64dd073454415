"""Hydra search-path plugin: trainstack's configs for every Hydra entry point (the `trainstack
launch` app and the compose API), found wherever the package is installed."""
