"""What the API host reads on a request's behalf is capped (finding 6): a model's config.json
from S3 or the Hub is read up to 1 MB, by one ranged or streamed read, and nothing is written
(the deployed pod has a read-only root and no home: no Hub cache)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.test_api_boundary import refused
from tests.hf.fake_hub import Repo, fake_hub
from trainer.hf.hub import MAX_CONFIG_BYTES

CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2}


def big_config() -> bytes:
    return json.dumps({**CONFIG, "pad": "x" * (3 * MAX_CONFIG_BYTES)}).encode()


@pytest.fixture
def big_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    model = tmp_path / "big-model"
    model.mkdir()
    (model / "config.json").write_bytes(big_config())
    with fake_hub({"org/big": Repo(model, {"main": "c" * 40, "v1": "d" * 40})}) as served:
        monkeypatch.setenv("HF_ENDPOINT", served.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield served


def test_a_hub_config_json_is_capped_and_nothing_is_cached(api, apiserver, big_hub, tmp_path):
    for revision in ("main", "v1"):
        request = api.run_request("h1", model="hf", init_from=f"hf://org/big@{revision}")
        detail = refused(api.client.post("/v1/runs", json=request, params={"dryrun": "true"}))
        assert f"config.json is over {MAX_CONFIG_BYTES} bytes" in detail, detail
    assert not (tmp_path / "hf-home").exists()  # no Hub cache written on the API host


def test_an_s3_config_json_is_read_once_and_capped(fault_proxy, s3_bucket):
    from trainer.errors import ConfigError
    from trainer.hf.config import read_hf_config
    from trainer.storage.s3 import make_s3_client

    client = make_s3_client()
    client.put_object(Bucket=s3_bucket, Key="models/big/config.json", Body=big_config())
    client.put_object(Bucket=s3_bucket, Key="models/ok/config.json", Body=json.dumps(CONFIG))
    mark = len(fault_proxy.transfers)
    with pytest.raises(ConfigError, match=f"config.json is over {MAX_CONFIG_BYTES} bytes"):
        read_hf_config(f"s3://{s3_bucket}/models/big")
    received = sum(t.received for t in fault_proxy.transfers[mark:])
    assert received <= MAX_CONFIG_BYTES + 64 * 1024, received
    assert read_hf_config(f"s3://{s3_bucket}/models/ok") == CONFIG


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"model": "hf", "init_from": "s3://other-team/models/x"}, "outside the training pods"),
        ({"trainer": {"resume_from": "s3://other-team/runs/x"}}, "outside the training pods"),
        ({"data": "s3://payroll/train.jsonl"}, "outside the training pods"),
        (
            {"model": "hf", "init_from": "s3://arn:aws:s3:us-east-1:123456789012:accesspoint/ap/x"},
            "(no ARNs)",
        ),
        (
            {"data": "s3://arn:aws:s3-outposts:us-east-1:123456789012:outpost/op/bucket/b/k"},
            "(no ARNs)",
        ),
    ],
)
def test_the_deployed_api_reads_only_inside_the_stacks_grants(api, apiserver, fields, fragment):
    """Finding 12: as deployed, the service has the stack's grants (infra passes them), so
    no request makes it read another bucket with its own credentials, nor contact a host an
    access-point ARN names."""
    request = api.run_request("g1", **fields)
    detail = refused(api.client.post("/v1/runs", json=request, params={"dryrun": "true"}))
    assert fragment in detail, detail
    assert "stack-bucket" not in detail  # the service's bucket is not echoed


def test_error_lines_never_carry_an_endpoint(api):
    line = (
        "model.init_from: cannot read config.json: Could not connect to the endpoint URL: "
        '"https://vpce-0a1b.s3.us-east-1.vpce.amazonaws.com/bucket/models/x/config.json"'
    )
    assert "amazonaws.com" not in api.service.redact(line)
    assert "https://" not in api.service.redact("see http://10.0.0.5:9000/x for details")
