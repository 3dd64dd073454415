"""The Hydra tree composes for every option, and the schema rejects typos and wrong types."""

from __future__ import annotations

import pytest
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from catalog import INSTANCE_TYPES
from catalog.kubernetes import KUBERNETES_VERSION
from jobs.compose import CONF_DIR, compose
from jobs.schema import LaunchConfig

GROUP_OPTIONS = {
    group: sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    for group in ("model", "data", "trainer", "backend", "storage", "experiment")
}


def test_defaults_compose_to_exactly_the_interface_keys():
    cfg = compose()
    assert list(cfg.keys()) == list(LaunchConfig.__dataclass_fields__)
    assert cfg.compute.name == "local_cpu" and cfg.compute.procs_per_node == 2
    assert (cfg.backend.name, cfg.storage.root, cfg.model.name) == ("local", "runs", "tiny")
    assert cfg.cluster.namespace == "training"


def test_jobs_validate_against_the_version_new_clusters_run():
    """Without a stack, pod templates are checked against the default cluster version: the one
    constant infra creates clusters at, and one kubernetes-validate bundles schemas for."""
    from infra.settings.versions import KUBERNETES_VERSION as cluster_default
    from jobs.backends.kubernetes.manifest_checks import _schema_version

    assert compose().cluster.kubernetes_version == KUBERNETES_VERSION == cluster_default
    assert _schema_version(KUBERNETES_VERSION).startswith(KUBERNETES_VERSION + ".")


@pytest.mark.parametrize(
    "group,option", [(g, o) for g, options in GROUP_OPTIONS.items() for o in options]
)
def test_every_group_option_composes(group: str, option: str):
    overrides = [f"{group}={option}"]
    if group == "storage" and option == "s3":
        overrides.append("storage.root=s3://bucket/prefix")
    cfg = compose(overrides)
    if group == "model":  # `hf`: no preset, the checkpoint's config.json names the shape
        assert cfg.model.name == (None if option == "hf" else option)


def test_required_groups_and_experiments_exist():
    assert {"tiny", "llama3_1b", "llama3_8b", "llama3_70b"} <= set(GROUP_OPTIONS["model"])
    assert {"sample", "jsonl"} <= set(GROUP_OPTIONS["data"])
    assert {"local", "render", "kubernetes"} == set(GROUP_OPTIONS["backend"])
    assert {"smoke", "llama3_8b_p5x4"} <= set(GROUP_OPTIONS["experiment"])
    assert (CONF_DIR / "stack" / "none.yaml").is_file()


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_compute_options_come_from_the_catalog(name: str):
    cfg = compose([f"compute={name}", "compute.nodes=3"])
    assert cfg.compute.instance_type == name
    assert cfg.compute.gpus_per_node == INSTANCE_TYPES[name].gpus
    assert cfg.compute.nodes == 3


def test_experiments_set_what_they_promise():
    smoke = compose(["experiment=smoke"])
    assert smoke.model.name == "tiny" and smoke.trainer.max_steps <= 50
    big = compose(["experiment=llama3_8b_p5x4"])
    assert (big.model.name, big.compute.instance_type, big.compute.nodes) == (
        "llama3_8b",
        "p5.48xlarge",
        4,
    )
    # Command-line choices still win over an experiment's.
    assert compose(["experiment=smoke", "trainer.max_steps=7"]).trainer.max_steps == 7


@pytest.mark.parametrize(
    "override",
    [
        "trainer.maxsteps=3",  # typo
        "trainer.max_steps=many",  # wrong type
        "compute.nodes=1.5",
        "model=gpt5",  # unknown option
        "compute=p9.large",
        "job.elastic.min=2",
    ],
)
def test_schema_rejects_typos_and_wrong_types(override: str):
    with pytest.raises((HydraException, OmegaConfBaseException)):
        compose([override])


def test_nested_sections_take_dict_and_dotted_overrides():
    cfg = compose(["job.elastic={min_nodes:2,max_nodes:4}", "job.secrets.hf_token.name=hf"])
    assert (cfg.job.elastic.min_nodes, cfg.job.elastic.max_nodes) == (2, 4)
    assert cfg.job.secrets.hf_token.name == "hf"
