"""The backend registry (jobs/backend_registry/): one package per backend (jobs/backends/) with
its own options (a key of another backend refused at compose time, in one line), its own checks
and its describe (listed by `trainstack launch --help`); a fourth backend is its package, one
table line and its option file."""

from __future__ import annotations

import importlib
import sys

import pytest
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import jobs.backend_registry as backend_registry
from jobs.backend_registry import (
    NAMES,
    backend_for,
    configured,
    described,
    recorded_backend,
    traits_of,
)
from jobs.backends.kubernetes import KubernetesOptions
from jobs.backends.local import LocalOptions
from jobs.compose import compose
from jobs.config_path import CONFIG_PATH_ENV, SHIPPED_CONF_DIR
from jobs.errors import JobConfigError, one_line
from jobs.validate import check_backend

LOCAL_KEYS = "name, others_runs, output_root, poll_interval_s, wait"


def test_every_backend_has_its_option_file_and_its_own_options():
    shipped = sorted(p.stem for p in (SHIPPED_CONF_DIR / "backend").glob("*.yaml"))
    assert shipped == sorted(NAMES)
    for name in NAMES:
        options = traits_of(name).options
        assert traits_of(name).name == options.name == name
        assert OmegaConf.get_type(compose([f"backend={name}"]).backend) is options
    assert OmegaConf.get_type(compose([]).backend) is LocalOptions


def test_a_key_of_another_backend_fails_at_compose_time_naming_the_backend():
    with pytest.raises(ConfigCompositionException) as caught:
        compose(["backend=local", "backend.preflight=false"])
    assert one_line(caught.value) == (
        f"backend.preflight: is not a key of backend=local; allowed: {LOCAL_KEYS}"
    )
    with pytest.raises(ConfigCompositionException) as caught:
        compose(["backend=render", "backend.preflight=true"])
    assert one_line(caught.value).startswith("backend.preflight: is not a key of backend=render")
    # The kubernetes backend reads them; every backend reads the shared keys.
    cfg = compose(["backend=kubernetes", "backend.preflight=false", "backend.poll_interval_s=1"])
    assert cfg.backend.preflight is False and cfg.backend.poll_interval_s == 1
    assert compose(["backend=local", "backend.wait=true"]).backend.wait is True


def test_the_launch_line_says_it_in_one_line_and_exits_2(cli):
    result = cli("launch", "--dryrun", "backend=local", "backend.preflight=false")
    assert result.code == 2
    assert result.err.strip() == (
        "trainstack launch: backend.preflight: is not a key of backend=local; "
        f"allowed: {LOCAL_KEYS}"
    )


def test_a_flag_meant_for_another_backend_is_named_in_its_refusal(cli):
    """`--skip-preflight` sets the kubernetes backend's `backend.preflight`: on backend=local the
    refusal names the flag the user typed, then the key."""
    result = cli("launch", "--dryrun", "--skip-preflight", "backend=local")
    assert result.code == 2
    assert result.err.strip() == (
        "trainstack launch: --skip-preflight sets backend.preflight: is not a key of "
        f"backend=local; allowed: {LOCAL_KEYS}"
    )


def test_a_key_added_to_another_backends_options_or_its_name_is_refused_not_ignored():
    cfg = compose(["+backend.preflight=false"])
    with pytest.raises(JobConfigError) as caught:
        check_backend(cfg)
    assert str(caught.value) == (
        f"backend.preflight: is not a key of backend=local; allowed: {LOCAL_KEYS}"
    )
    cfg = compose(["backend.name=kubernetes"])
    with pytest.raises(JobConfigError) as caught:
        check_backend(cfg)
    assert str(caught.value) == (
        "backend.name: is 'kubernetes' on backend=local's options; allowed: pick the backend "
        "with backend=kubernetes (the group), not backend.name"
    )


def test_each_backend_is_described_in_the_launch_help(cli):
    lines = described().splitlines()
    assert [line.split(" : ")[0].strip() for line in lines] == list(NAMES)
    help_text = cli("launch", "--help").out
    for name in NAMES:
        assert traits_of(name).describe in help_text, name


def test_a_backend_consulted_from_another_backends_composition_reads_its_own_options():
    """`trainstack cancel RUN --force` composes once (backend=local) and asks every backend."""
    cfg = compose(["backend.others_runs=true", "backend.output_root=elsewhere"])
    kube = configured(cfg, "kubernetes").backend
    assert OmegaConf.get_type(kube) is KubernetesOptions
    assert kube.others_runs is True and kube.output_root == "elsewhere"
    assert kube.preflight is True  # its own keys at their defaults
    assert configured(cfg, "local") is cfg


def test_a_relaunch_reads_a_record_holding_every_backends_keys():
    """A run recorded when `backend` held every backend's keys keeps only its backend's."""
    cfg = compose([])
    OmegaConf.set_readonly(cfg, False)
    old = {"name": "local", "output_root": "runs", "wait": False, "others_runs": False}
    old["poll_interval_s"] = 5.0
    old_all = {**old, "preflight": True}
    record = recorded_backend(cfg, {"seed": 1, "backend": old_all})
    assert record == {"seed": 1, "backend": old}
    OmegaConf.merge(cfg, record)  # fits today's schema
    cfg = compose(["backend=render"])
    OmegaConf.set_readonly(cfg, False)
    recorded_backend(cfg, {"backend": {"name": "kubernetes", "preflight": False}})
    assert OmegaConf.get_type(cfg.backend) is KubernetesOptions


FOURTH_PACKAGE = """
from dataclasses import dataclass

from jobs.backend_registry.traits import BackendOptions, BackendTraits


@dataclass
class FourthOptions(BackendOptions):
    name: str = "fourth"
    queue: str = "default"


TRAITS = BackendTraits(
    name="fourth", describe="hand the job to the fourth way", options=FourthOptions, pods=False
)
"""
FOURTH_BACKEND = """
class FourthBackend:
    name = "fourth"

    def __init__(self, queue):
        self.queue = queue

    @classmethod
    def from_config(cls, cfg, shared=None):
        return cls(cfg.backend.queue)


BACKEND = FourthBackend
"""


@pytest.fixture
def fourth(tmp_path, monkeypatch):
    """A fourth backend: its package (two files), its line in the table and its option file
    (here in a user config dir); the rest is what the registry derives."""
    package = tmp_path / "fourth_backend"
    package.mkdir()
    (package / "__init__.py").write_text(FOURTH_PACKAGE)
    (package / "backend.py").write_text(FOURTH_BACKEND)
    conf = tmp_path / "conf" / "backend"
    conf.mkdir(parents=True)
    (conf / "fourth.yaml").write_text(
        "defaults:\n  - /trainstack_backend_fourth@_here_\n  - _self_\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(CONFIG_PATH_ENV, str(tmp_path / "conf"))
    monkeypatch.setitem(backend_registry.BACKENDS, "fourth", "fourth_backend")  # the one line
    # NAMES is derived from the table
    monkeypatch.setattr(backend_registry, "NAMES", tuple(backend_registry.BACKENDS))
    # What importing the table registers (the schema's entry, the launcher plugin's config).
    store = ConfigStore.instance()
    backend_registry.register(store)
    launcher_config = importlib.import_module("hydra_plugins.trainstack_launcher.config")
    importlib.reload(launcher_config)
    yield
    store.repo.pop("trainstack_backend_fourth.yaml", None)
    store.repo["hydra"]["launcher"].pop("backend_fourth.yaml", None)
    for module in ("fourth_backend.backend", "fourth_backend"):
        sys.modules.pop(module, None)


def test_a_fourth_backend_is_its_package_one_table_line_and_its_option_file(fourth):
    cfg = compose(["backend=fourth", "backend.queue=fast"])
    assert OmegaConf.get_type(cfg.backend).__name__ == "FourthOptions"
    check_backend(cfg)
    assert backend_for(cfg).queue == "fast"
    name, describe = described().splitlines()[-1].split(" : ")
    assert (name.strip(), describe) == ("fourth", "hand the job to the fourth way")
    with pytest.raises(ConfigCompositionException) as caught:
        compose(["backend=local", "backend.queue=fast"])
    assert one_line(caught.value).startswith("backend.queue: is not a key of backend=local;")
    with pytest.raises(ConfigCompositionException) as caught:
        compose(["backend=fourth", "backend.preflight=false"])
    assert one_line(caught.value) == (
        "backend.preflight: is not a key of backend=fourth; allowed: name, others_runs, "
        "output_root, poll_interval_s, queue, wait"
    )
