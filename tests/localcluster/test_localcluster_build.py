"""How localcluster builds the engine from Go modules: a go.mod of our own keeps the replaces
that name published modules (pkg/v3's clipboard fork) and drops those to folders the module's
zip lacks; each binary is stamped with its version the way the project's release stamps it."""

from __future__ import annotations

import shutil

import pytest

from localcluster import build
from localcluster.versions import COMPONENTS, ENGINE, PULUMI, PULUMI_KUBERNETES

needs_go = pytest.mark.skipif(shutil.which(build.GO) is None, reason="needs Go")

CLIPBOARD = "github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e"
PKG_GO_MOD = f"""module github.com/pulumi/pulumi/pkg/v3

go 1.26.6

replace github.com/pulumi/pulumi/sdk/v3 => ../sdk

replace github.com/atotto/clipboard => {CLIPBOARD}

require github.com/pulumi/pulumi/sdk/v3 v3.276.0
"""
"""The replace lines of github.com/pulumi/pulumi/pkg/v3 v3.276.0's go.mod, as served."""


@needs_go
def test_published_replaces_are_kept_local_ones_dropped(tmp_path):
    go_mod = tmp_path / "go.mod"
    go_mod.write_text(PKG_GO_MOD)
    published, local = build._replaces(go_mod)
    assert published == [f"\tgithub.com/atotto/clipboard => {CLIPBOARD}"]
    assert local == ["github.com/pulumi/pulumi/sdk/v3"]
    assert build._go_directive(go_mod) == "1.26.6"


def test_go_versions_compare_as_numbers():
    assert max("1.26.6", "1.25.0", "1.9", key=build._go_version_key) == "1.26.6"


def test_engine_binaries_are_stamped_with_their_versions():
    assert f"-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={PULUMI.version}" in (
        build._ldflags(PULUMI)
    )
    provider = PULUMI_KUBERNETES.version.removeprefix("v")
    assert (
        f"-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version={provider}"
        in build._ldflags(PULUMI_KUBERNETES)
    )


def test_the_engine_joins_the_cached_build():
    """`python -m localcluster build` (make test's background build) builds the engine too, each
    under its own name and version."""
    assert all(component in COMPONENTS for component in ENGINE)
    assert PULUMI.key == f"pulumi-{PULUMI.version}"
    assert build.bin_dir(PULUMI_KUBERNETES).parent.name == PULUMI_KUBERNETES.key
