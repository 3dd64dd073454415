"""The GPU machine's package set on another machine (the check's CPU form, in the tests).

On PYTHONPATH only when `benchmarks.gpu.check --device-packages` asks: every top-level package
named in TRAINSTACK_GPU_CHECK_DENY is then missing, as it is on the GPU machine (import raises
ModuleNotFoundError, `importlib.util.find_spec` says None), except from a wheel on sys.path
(`benchmarks/gpu/wheels`): the trainer's GPU path must run on that machine's packages plus
the wheels the check carries.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_DENIED = frozenset(filter(None, os.environ.get("TRAINSTACK_GPU_CHECK_DENY", "").split(",")))
_WHEELS = [p for p in sys.path if p.endswith(".whl")]


def _from_wheels(name: str):
    return importlib.machinery.PathFinder.find_spec(name, _WHEELS)


class _DevicePackages(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if path is not None or name not in _DENIED:
            return None  # a submodule (found through its package), or allowed
        spec = _from_wheels(name)
        if spec is None:
            problem = f"No module named {name!r} (not on the GPU machine)"
            raise ModuleNotFoundError(problem, name=name)
        return spec


_find_spec = importlib.util.find_spec


def _device_find_spec(name, package=None):
    top = importlib.util.resolve_name(name, package).partition(".")[0] if name else name
    if top in _DENIED and top not in sys.modules and _from_wheels(top) is None:
        return None
    return _find_spec(name, package)


if _DENIED:
    sys.meta_path.insert(0, _DevicePackages())
    importlib.util.find_spec = _device_find_spec
