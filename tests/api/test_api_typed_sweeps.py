"""POST /v1/sweeps with typed fields and `axes`: the same runs as the overrides it stands for,
each axis value data (quoted), each axis key a plain config key."""

from __future__ import annotations

import json
import re

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import QuotedString
from omegaconf import OmegaConf

from jobs.api.models import RunRequest, SweepRequest, to_overrides, to_sweep_overrides
from jobs.compose import compose
from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE
from tests.api.test_api_boundary import refused
from tests.api.test_api_runs import stored


def _config(apiserver, run_id: str, sweep_id: str) -> str:
    """The run's stored objects as text: its ids, its sweep's and its submission time replaced
    by placeholders."""
    text = json.dumps(stored(apiserver, run_id), sort_keys=True)
    text = re.sub(r'"trainstack.io/created-at": "[^"]*"', "<created-at>", text)
    return text.replace(run_id, "<run>").replace(sweep_id, "<sweep>")


def test_a_typed_sweep_submits_the_runs_its_overrides_would(api, apiserver):
    untyped = {
        "overrides": [
            f"compute={GPU_TYPE}",
            f"job.image={IMAGE}",
            "compute.nodes=1",
            "trainer.max_steps=7",
            "trainer.lr=1e-3,3e-3",
            "trainer.warmup_steps=0,5",
        ],
        "sweep_id": "plainsw",
    }
    typed = {
        "compute": GPU_TYPE,
        "image": IMAGE,
        "nodes": 1,
        "trainer": {"max_steps": 7},
        "axes": {"trainer.lr": [1e-3, 3e-3], "trainer.warmup_steps": [0, 5]},
        "sweep_id": "typedsw",
    }
    first = api.client.post("/v1/sweeps", json=untyped)
    second = api.client.post("/v1/sweeps", json=typed)
    assert first.status_code == second.status_code == 201, (first.text, second.text)
    ids = [r["run_id"] for r in second.json()["runs"]]
    assert ids == [f"typedsw-{i}" for i in range(4)]
    assert [r["run_id"] for r in first.json()["runs"]] == [f"plainsw-{i}" for i in range(4)]
    for index in range(4):
        assert _config(apiserver, f"typedsw-{index}", "typedsw") == _config(
            apiserver, f"plainsw-{index}", "plainsw"
        )
    # Typed fields and raw overrides together, as a run request takes them.
    mixed = {**typed, "overrides": ["trainer.warmup_steps=1,2"], "axes": {"trainer.lr": [1e-3]}}
    response = api.client.post("/v1/sweeps", json={**mixed, "sweep_id": "mx"})
    assert [r["run_id"] for r in response.json()["runs"]] == ["mx-0", "mx-1"]


@pytest.mark.parametrize("value", ["a,b", "it's", 'say "hi"', "x,'y'", "back\\slash,", "end\\"])
def test_an_axis_value_with_commas_or_quotes_stays_one_value(value):
    overrides = to_sweep_overrides(SweepRequest(axes={"data.path": [value, "plain"]}))
    parsed = OverridesParser.create().parse_override(overrides[-1])
    assert parsed.key_or_group == "data.path"
    texts = [v.text if isinstance(v, QuotedString) else v for v in parsed.value().list]
    assert texts == [value, "plain"]


@pytest.mark.parametrize(
    "key",
    [
        "trainer.lr=1",
        "trainer.lr,trainer.seed",
        "+trainer.new",
        "~trainer.lr",
        "trainer.${oc.env:HOME}",
        "trainer lr",
        "trainer.'lr'",
        'trainer."lr"',
        "hydra.job.name@pkg",
        "",
    ],
)
def test_a_grammar_like_axis_key_is_one_422_naming_it(api, apiserver, key):
    request = {"compute": GPU_TYPE, "image": IMAGE, "axes": {key: [1, 2]}}
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert detail.startswith(f"axes: {key!r} is not a config key; allowed: a dotted key")
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


@pytest.mark.parametrize("key", ["job.owner", "job.image_repository", "backend.output_root"])
def test_an_axis_on_a_key_the_service_keeps_is_refused(api, apiserver, key):
    request = {"compute": GPU_TYPE, "image": IMAGE, "axes": {key: ["a", "b"]}}
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert detail.startswith(f"{key}: ")
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_an_axis_on_a_key_the_services_own_overrides_set_is_refused(api, apiserver):
    """A key the deployed service sets itself (its overrides) is refused as in `overrides`,
    even set to the service's own value (which no later check would see as a change)."""
    assert "storage.root" in api.service._service_keys
    ours = OmegaConf.select(api.service.cfg, "storage.root")
    for values in ([ours], [ours, f"{ours}/other"]):
        request = {"compute": GPU_TYPE, "image": IMAGE, "axes": {"storage.root": values}}
        detail = refused(api.client.post("/v1/sweeps", json=request))
        assert detail == "storage.root: set by the service, not by a request"
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_an_empty_axis_is_refused_not_a_sweep_of_nothing(api, apiserver):
    axes = {"trainer.max_steps": [], "trainer.warmup_steps": [0, 1]}
    request = {"compute": GPU_TYPE, "image": IMAGE, "axes": axes}
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert detail == "axes.trainer.max_steps: no value; allowed: a list of one or more values"
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_a_sweep_needs_overrides_or_axes(api, apiserver):
    detail = refused(api.client.post("/v1/sweeps", json={"compute": GPU_TYPE, "image": IMAGE}))
    assert detail.startswith("overrides, axes: a sweep needs at least one")


@pytest.mark.parametrize(
    ("axes", "overrides"),
    [
        ({"trainer.lr": list(range(16)), "trainer.warmup_steps": list(range(17))}, []),  # 272
        ({f"trainer.k{i}": [1, 2] for i in range(9)}, []),  # 512
        ({"trainer.lr": list(range(129))}, ["trainer.warmup_steps=1,2"]),  # 258
    ],
)
def test_the_point_cap_counts_the_axes(api, apiserver, axes, overrides):
    request = {"compute": GPU_TYPE, "image": IMAGE, "axes": axes, "overrides": overrides}
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert "more than 256 points; allowed: at most 256 per request" in detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_a_backslash_reaches_the_config_unchanged():
    """Hydra unescapes only backslashes before a quote: doubling every one (as before) gave
    the run `a\\\\b` for `a\\b`."""
    command = ["python", "a\\b", "end\\", "q\\'x", "\\\\"]
    cfg = compose(to_overrides(RunRequest(runner="command", command=command, data="C:\\d")))
    assert list(cfg.runner.command) == command
    assert cfg.data.path == "C:\\d"


def test_an_axis_longer_than_the_cap_is_refused_before_it_is_rendered(api, apiserver):
    request = {"compute": GPU_TYPE, "image": IMAGE, "axes": {"trainer.lr": list(range(257))}}
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert detail.startswith("axes.trainer.lr: ") and "at most 256" in detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []
