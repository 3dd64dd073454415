"""The self-test's locked-memory check: EFA needs RLIMIT_MEMLOCK unlimited, and a node whose
runtime sets a finite limit fails with one line; without EFA the check is skipped."""

from __future__ import annotations

import resource

import pytest

from trainer import smoke


def test_a_finite_memlock_limit_fails_on_an_efa_node_with_one_line(monkeypatch):
    monkeypatch.setattr(smoke, "locked_memory_limit", lambda: 8 * 1024 * 1024)
    with pytest.raises(smoke.SmokeFailure) as failure:
        smoke.check_memlock(smoke.parse_args(["--efa", "require"]))
    assert str(failure.value) == (
        "EFA expected (--efa require) but the locked-memory limit is 8388608 bytes, "
        "expected unlimited (set the container runtime's default memlock ulimit to unlimited)"
    )


def test_an_unlimited_limit_passes_and_no_efa_skips(monkeypatch, capsys):
    monkeypatch.delenv("FI_PROVIDER", raising=False)
    monkeypatch.setattr(smoke, "locked_memory_limit", lambda: resource.RLIM_INFINITY)
    opts = smoke.parse_args(["--efa", "require"])
    assert smoke.check_memlock(opts) == "locked-memory limit unlimited (--efa require)"
    monkeypatch.setattr(smoke, "locked_memory_limit", lambda: 1)
    assert (
        smoke.check_memlock(smoke.parse_args(["--efa", "skip"])) == "no EFA on this node: skipped"
    )
