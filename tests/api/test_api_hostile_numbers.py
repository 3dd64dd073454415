"""Issue 43: the typed run and sweep requests tried as an attacker would. The point cap counts
what Hydra enumerates, numbers are finite and within int64, typed option names are names,
an axis may sweep a config group, and every refusal names the field as the client wrote it.
Each is one 4xx line and nothing reaches the cluster."""

from __future__ import annotations

import itertools
import json

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from contract.checks import MAX_STEP_COUNT, in_range
from jobs.api.request_policy import MAX_SWEEP_POINTS, Refused, _sweep_values, check_request
from jobs.sweep import TooManyPoints, expand
from tests.api.conftest import GPU_TYPE, IMAGE, NAMESPACE
from tests.api.test_api_boundary import refused

TRICKY = "range(0.3,1.6014593607424792,1.3014593607424791)"
"""Counted as 1 point by `(stop - start) / step` in floats; Hydra's Decimal steps give 2."""
HUGE = 10**400


def _base(**fields) -> dict:
    return {"compute": GPU_TYPE, "image": IMAGE, **fields}


@pytest.mark.parametrize(
    "sweep",
    [
        TRICKY,
        "range(0,1,0.1)",
        "range(0.1,0.7,0.1)",
        "range(1e20,1e21,1e-10)",  # Decimal (28 digits): 1e20 + 1e-10 is 1e20: endless
        "range(5,0,-1)",
        "range(0,100000000000)",
        "shuffle(range(0,3))",
        "sort(range(3,0,-1))",
    ],
)
def test_a_range_is_counted_as_hydra_enumerates_it(sweep):
    override = OverridesParser.create().parse_override(f"trainer.lr={sweep}")
    listed = list(itertools.islice(override._value.range(), MAX_SWEEP_POINTS + 1))
    assert _sweep_values("trainer.lr", override._value) == len(listed)


def test_the_expansion_itself_refuses_past_the_cap():
    """Whatever a count said before, `expand` never lists more than its cap."""
    with pytest.raises(TooManyPoints, match="more than 256 points"):
        expand(["trainer.lr=range(0,100000000000)"], max_points=MAX_SWEEP_POINTS)
    with pytest.raises(TooManyPoints):
        expand([f"trainer.k{i}=1,2" for i in range(9)], max_points=MAX_SWEEP_POINTS)
    assert len(expand([f"trainer.k{i}=1,2" for i in range(8)], max_points=256)) == 256


def test_float_ranges_that_count_short_cannot_pass_the_cap(api, apiserver):
    """Eight TRICKY ranges: 2**8 points, counted as 1 by the old arithmetic; with a 2-valued
    axis the request is past the cap and refused before anything is composed."""
    keys = ["lr", "min_lr_ratio", "grad_clip", "peak_tflops", "k1", "k2", "k3", "k4"]
    overrides = [f"trainer.{k}={TRICKY}" for k in keys]
    request = _base(overrides=overrides, axes={"trainer.warmup_steps": [0, 1]})
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert "more than 256 points; allowed: at most 256 per request" in detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/v1/runs", _base(run_id="n1", trainer={"max_steps": HUGE}), "trainer.max_steps"),
        ("/v1/runs", _base(run_id="n1", trainer={"lr": HUGE}), "trainer.lr"),
        ("/v1/runs", _base(run_id="n1", nodes=HUGE), "nodes"),
        ("/v1/runs", _base(run_id="n1", args={"x": HUGE}, runner="command"), "args.x"),
        ("/v1/runs", _base(run_id="n1", overrides=[f"trainer.max_steps={HUGE}"]), "trainer."),
        ("/v1/sweeps", _base(axes={"trainer.max_steps": [1, HUGE]}), "axes.trainer.max_steps[1]"),
        ("/v1/sweeps", _base(overrides=[f"trainer.max_steps=range(1,{HUGE})"]), "trainer."),
        ("/v1/sweeps", _base(overrides=[f"trainer.max_steps=range({HUGE},1,-1)"]), "trainer."),
    ],
)
@pytest.mark.parametrize("dryrun", ["false", "true"])
def test_a_huge_integer_is_a_422_naming_where_it_was(api, apiserver, path, body, named, dryrun):
    """A 400-digit integer raised OverflowError (math.isfinite, OmegaConf's float, the
    plan's hours): a 500."""
    params = {"dryrun": dryrun} if path == "/v1/runs" else {}
    detail = refused(api.client.post(path, json=body, params=params))
    assert detail.startswith(named) and "int64" in detail, detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


@pytest.mark.parametrize(
    ("path", "text", "named"),
    [
        ("/v1/runs", '{"trainer": {"lr": NaN}}', "trainer.lr: nan"),
        ("/v1/runs", '{"trainer": {"lr": Infinity}}', "trainer.lr: inf"),
        ("/v1/runs", '{"trainer": {"lr": 1e309}}', "trainer.lr: inf"),
        ("/v1/runs", '{"overrides": ["trainer.lr=nan"]}', "trainer.lr: nan"),
        ("/v1/runs", '{"overrides": ["trainer.grad_clip=-inf"]}', "trainer.grad_clip: -inf"),
        ("/v1/sweeps", '{"axes": {"trainer.lr": [1e-3, 1e309]}}', "axes.trainer.lr[1]: inf"),
        ("/v1/sweeps", '{"axes": {"trainer.lr": [NaN]}}', "axes.trainer.lr[0]: nan"),
        ("/v1/sweeps", '{"overrides": ["trainer.lr=range(0,inf)"]}', "trainer.lr: range(): inf"),
    ],
)
def test_nan_and_infinity_are_refused(api, apiserver, path, text, named):
    """The body as written (json.dumps would turn 1e309 into Infinity)."""
    base = json.dumps(_base(**({"run_id": "nan1"} if path == "/v1/runs" else {})))
    content = base[:-1] + ", " + text[1:]
    headers = {"Content-Type": "application/json"}
    detail = refused(api.client.post(path, content=content, headers=headers))
    assert detail.startswith(named) and "allowed: a finite number" in detail, detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_step_counts_have_a_ceiling(api, apiserver):
    for steps in (2**62, MAX_STEP_COUNT + 1):
        request = _base(run_id="big1", trainer={"max_steps": steps})
        detail = refused(api.client.post("/v1/runs", json=request, params={"dryrun": "true"}))
        assert detail.startswith(f"trainer.max_steps: {steps} is out of range"), detail
    request = _base(run_id="big1", trainer={"max_steps": MAX_STEP_COUNT})
    assert api.client.post("/v1/runs", json=request, params={"dryrun": "true"}).status_code == 200
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


@pytest.mark.parametrize(
    ("value", "low", "high", "ok"),
    [
        (float("nan"), 0, None, False),
        (float("nan"), 0, 1, False),
        (float("inf"), 0, None, False),
        (-float("inf"), 0, None, False),
        (HUGE, 1, None, False),  # math.isfinite(HUGE) raises OverflowError
        (2**63, 1, None, False),
        (2**63 - 1, 1, None, True),
        (0.5, 0, 1, True),
        (1, 1, MAX_STEP_COUNT, True),
    ],
)
def test_the_contracts_ranges_need_finite_numbers(value, low, high, ok):
    assert in_range(value, low, high) is ok


@pytest.mark.parametrize("field", ["model", "compute"])
@pytest.mark.parametrize("value", ["llama3_8b,tiny", "choice(tiny,llama3_8b)", "range(1,3)"])
@pytest.mark.parametrize("path", ["/v1/runs", "/v1/sweeps"])
def test_typed_option_names_are_names_not_grammar(api, apiserver, field, value, path):
    """`"model": "llama3_8b,tiny"` made a 2-point sweep of a run or sweep request."""
    body = {**_base(), field: value}
    body |= {"run_id": "opt1"} if path == "/v1/runs" else {"axes": {"trainer.lr": [1e-3]}}
    detail = refused(api.client.post(path, json=body))
    assert detail.startswith(f"{field}: {value!r} is not an option name"), detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_an_axis_may_sweep_a_config_group(api, apiserver):
    request = _base(axes={"model": ["tiny", "llama3_1b"]}, sweep_id="grp")
    response = api.client.post("/v1/sweeps", json=request)
    assert response.status_code == 201, response.text
    assert [r["run_id"] for r in response.json()["runs"]] == ["grp-0", "grp-1"]
    models = [
        apiserver.get("configmaps", f"grp-{i}-config", NAMESPACE)["data"]["config.yaml"]
        for i in range(2)
    ]
    assert "name: tiny" in models[0] and "name: llama3_1b" in models[1]


@pytest.mark.parametrize("value", ["../backend/local", "tiny,llama3_8b", "a@b", 1, None])
def test_a_group_axis_takes_option_names_only(api, apiserver, value):
    request = _base(axes={"model": ["tiny", value]})
    detail = refused(api.client.post("/v1/sweeps", json=request))
    assert detail.startswith(f"axes.model[1]: {value!r} is not an option name"), detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_a_long_axis_is_checked_value_by_value(api, apiserver):
    """An axis over 4,096 characters in all was refused as `overrides[2]` in a request
    without overrides; each value is bounded on its own and named `axes.<key>[i]`."""
    long = ["s3://b/" + "x" * 3000, "s3://b/" + "y" * 3000]
    body = _base(axes={"data.path": long})
    response = api.client.post("/v1/sweeps", json=body)
    assert "overrides[" not in response.text and "characters" not in response.text
    body = _base(axes={"data.path": ["s3://b/ok", "z" * 5000]})
    detail = refused(api.client.post("/v1/sweeps", json=body))
    assert detail == "axes.data.path[1]: 5000 characters; allowed: at most 4096"
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


@pytest.mark.parametrize("key", ["x,y", "a b", "lr=1", "lr@pkg", "'lr'", "", "lr.", ".lr"])
def test_a_typed_trainer_key_is_named_as_written(api, apiserver, key):
    """A typed `trainer` key becomes part of an override's key: grammar in it was refused as
    `overrides[N]: not a Hydra override`, or read as grammar."""
    detail = refused(api.client.post("/v1/runs", json=_base(run_id="tk1", trainer={key: 1})))
    assert detail.startswith(f"trainer: {key!r} is not a config key"), detail
    assert apiserver.list("pytorchjobs", NAMESPACE) == []


def test_the_label_is_the_field_a_refused_override_came_from():
    with pytest.raises(Refused, match=r"^trainer\.lr: 5000 characters"):
        check_request({}, [("trainer.lr", "trainer.lr='" + "x" * 4987 + "'")])
    with pytest.raises(Refused, match=r"^overrides\[0\]: 5000 characters"):
        check_request({}, ["trainer.lr='" + "x" * 4987 + "'"])
