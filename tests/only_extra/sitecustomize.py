"""Python started with this directory on PYTHONPATH and TRAINSTACK_ONLY_EXTRA=<extra> sees only
what `pip install -c constraints.txt -e '.[<extra>]'` would have installed: any other
distribution's top-level modules raise ModuleNotFoundError, as in a venv without them. The
README's walkthroughs run under it with `local`, the extra `make run` installs, so a step that
needs more fails there as it would for a new user. Children (torchrun, the local backend's
supervisor) inherit it through the environment. The closure is computed from the installed
distributions' own metadata (Requires-Dist with their markers), not from a list kept here."""

from __future__ import annotations

import importlib.abc
import importlib.metadata as metadata
import os
import re
import sys

from packaging.requirements import Requirement


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(extra: str) -> set[str]:
    """Distribution names `trainstack[extra]` pulls in, here."""
    todo, seen = [("trainstack", frozenset({extra}))], {}
    while todo:
        name, extras = todo.pop()
        key = _key(name)
        if key in seen and extras <= seen[key]:
            continue
        seen[key] = seen.get(key, frozenset()) | extras
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            wanted = req.marker is None or any(
                req.marker.evaluate({"extra": e}) for e in (extras or {""})
            )
            if wanted:
                todo.append((req.name, frozenset(req.extras)))
    return set(seen)


class Hiding(importlib.abc.MetaPathFinder):
    """Wraps one of sys.meta_path's finders: a blocked top-level module is not found by it,
    so `importlib.util.find_spec` answers None and `import` raises ModuleNotFoundError, as in
    a venv without it (torch._dynamo probes optional modules with find_spec)."""

    def __init__(self, finder, blocked: set[str]):
        self.finder, self.blocked = finder, blocked

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, attribute):
        return getattr(self.finder, attribute)


BLOCKED_ENV = "TRAINSTACK_ONLY_EXTRA_BLOCKED"
"""`<extra>:<module>,<module>,...`: the modules `blocked(<extra>)` hides. Reading every
distribution's metadata takes ~1 s per process on a loaded machine, and a walkthrough starts
dozens (each command, the app it execs, the supervisor, torchrun, every rank): the first
process computes the set and its children inherit it (the README test computes it once for all
its shells). Another extra than the one named computes afresh."""


def blocked(extra: str) -> set[str]:
    """Top-level modules of the installed distributions `trainstack[extra]` does not pull in."""
    allowed = closure(extra) | {"pip"}  # every venv has pip
    return {
        module
        for module, dists in metadata.packages_distributions().items()
        if not any(_key(d) in allowed for d in dists)
    }


def blocked_env(extra: str) -> str:
    """The value of BLOCKED_ENV for `extra`."""
    return f"{extra}:{','.join(sorted(blocked(extra)))}"


def install(extra: str) -> None:
    if os.environ.get(BLOCKED_ENV, "").partition(":")[0] != extra:
        os.environ[BLOCKED_ENV] = blocked_env(extra)  # children inherit it
    hidden = set(os.environ[BLOCKED_ENV].partition(":")[2].split(",")) - {""}
    sys.meta_path[:] = [Hiding(finder, hidden) for finder in sys.meta_path]


if os.environ.get("TRAINSTACK_ONLY_EXTRA"):
    install(os.environ["TRAINSTACK_ONLY_EXTRA"])
