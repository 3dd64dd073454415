"""The bucket layout under Pulumi's mocks: every s3:// path the README's cluster examples read or
write is allowed to the pod role that touches it (and nothing beyond the layout is), extra
grants from `trainstack:dataAccess` reach both pod roles, and the grants are published."""

from __future__ import annotations

import json
import re

import pytest

from infra.settings.stack import ConfigError, parse_stack_config
from tests.infra.iam_eval import allowed, s3_access
from tests.infra.pulumi_harness import REPO, run_program, stack_file_config

TRAINING, PREPARE = "trainer", "data-prepare"
# Every `s3://<bucket>/...` of the README, with who touches it: a pod role (read or write), or
# a person with their own credentials (exports, uploads, local prepares, `aws s3 cp`).
README_PATHS = {
    "s3://<bucket>/runs": (TRAINING, True),
    "s3://<bucket>/runs/<run_id>/profile/": ("person", False),
    "s3://<bucket>/raw/train.jsonl": (TRAINING, False),
    "s3://<bucket>/raw/sft.jsonl": (TRAINING, False),
    "s3://<bucket>/raw/chat.jsonl": (TRAINING, False),
    "s3://<bucket>/tokenizers/llama3": (TRAINING, False),
    "s3://<bucket>/models/Meta-Llama-3.1-8B-Instruct": (TRAINING, False),
    "s3://<bucket>/models/qwen3-8b": (TRAINING, False),
    "s3://<bucket>/datasets/web": (TRAINING, False),
    "s3://<bucket>/datasets/code": (TRAINING, False),
    "s3://<bucket>/datasets/web-llama3": ("person", True),  # a local prepare
    "s3://<bucket>/raw/web/*.jsonl.zst": ("person", False),
    "s3://<bucket>/datasets/sft": (PREPARE, True),  # the cluster prepare
    "s3://<bucket>/raw/chat/": (PREPARE, False),
    "s3://<bucket>/models/Meta-Llama-3.1-8B-Instruct/": (PREPARE, False),
    "s3://<bucket>/models/my-sft": ("person", True),  # `trainstack export` on your machine
}
README_URL = re.compile(r"s3://<bucket>/[^\s'\"`)\]},]*")


FILE = re.compile(r"\.(jsonl|zst|gz|json|safetensors)$")


def an_object(url: str) -> str:
    """The object a pod touches for a README path: the file itself, else one inside the
    prefix (a glob matches a file)."""
    url = url.replace("*", "part-0")
    return url if FILE.search(url) else f"{url.rstrip('/')}/config.json"


def role_documents(run, suffix: str) -> list[str]:
    return [
        p.inputs["policy"]
        for p in run.of_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.endswith(f"-{suffix}-inline")
    ]


def test_readme_lists_only_classified_paths():
    found = set(README_URL.findall((REPO / "README.md").read_text()))
    assert found == set(README_PATHS), found ^ set(README_PATHS)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_readme_paths_are_granted_to_the_pods_that_touch_them(stack_runs, stack):
    run = stack_runs[stack]
    bucket = run.outputs["bucket"]
    docs = {role: role_documents(run, role) for role in (TRAINING, PREPARE)}
    assert all(docs.values())
    for path, (who, write) in README_PATHS.items():
        if who == "person":
            continue
        url = an_object(path.replace("<bucket>", bucket))
        assert s3_access(docs[who], url, write), (who, path, write)
    # ... and nothing beyond the layout: no pod overwrites a base model or a corpus, training
    # never writes prepared data, data-prepare never touches runs.
    for role, url, write in [
        (TRAINING, f"s3://{bucket}/models/base/model.safetensors", True),
        (TRAINING, f"s3://{bucket}/raw/web.jsonl", True),
        (TRAINING, f"s3://{bucket}/datasets/web/manifest.json", True),
        (TRAINING, f"s3://{bucket}/train.jsonl", False),
        (TRAINING, f"s3://{bucket}/image-builds/image.json", False),
        (PREPARE, f"s3://{bucket}/runs/r1/metrics.jsonl", False),
        (PREPARE, f"s3://{bucket}/models/x/config.json", True),
        (TRAINING, "s3://someone-elses-bucket/raw/x.jsonl", False),
    ]:
        assert not s3_access(docs[role], url, write), (role, url, write)


def test_published_grants_match_the_policies(stack_runs):
    run = stack_runs["dev"]
    grants = run.outputs["s3_grants"]
    bucket = run.outputs["bucket"]
    assert set(grants) == {"training", "data_prepare"}
    for role, suffix in (("training", TRAINING), ("data_prepare", PREPARE)):
        docs = role_documents(run, suffix)
        for grant in grants[role]:
            assert s3_access(docs, grant["url"] + "x/y", grant["access"] == "readwrite"), grant
    assert {"url": f"s3://{bucket}/runs/", "access": "readwrite"} in grants["training"]
    assert {"url": f"s3://{bucket}/datasets/", "access": "readwrite"} in grants["data_prepare"]
    assert run.outputs["data_prepare_service_account"] == "data-prepare"


def test_data_access_grants_reach_both_pod_roles(stack_runs):
    key = "arn:aws:kms:us-east-1:123456789012:key/" + "1" * 8 + "-2222-3333-4444-" + "5" * 12
    config = {
        **stack_file_config("dev"),
        "trainstack:dataAccess": [
            {"bucket": "corp-corpora", "prefix": "web", "access": "read"},
            {"bucket": "team-scratch", "access": "readwrite", "kmsKeyArn": key},
        ],
    }
    run = run_program(config, "dev")
    for role in (TRAINING, PREPARE):
        docs = role_documents(run, role)
        assert s3_access(docs, "s3://corp-corpora/web/part-0.jsonl", write=False)
        assert not s3_access(docs, "s3://corp-corpora/web/part-0.jsonl", write=True)
        assert not s3_access(docs, "s3://corp-corpora/private/x", write=False)
        assert s3_access(docs, "s3://team-scratch/any/thing", write=True)
        assert allowed(docs, "kms:GenerateDataKey", key)
    published = run.outputs["s3_grants"]["training"]
    assert {"url": "s3://corp-corpora/web/", "access": "read"} in published
    assert {"url": "s3://team-scratch/", "access": "readwrite"} in published


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"bucket": "Bad_Bucket"}, "trainstack:dataAccess[0].bucket"),
        ({"bucket": "ok-bucket", "access": "write"}, "trainstack:dataAccess[0].access"),
        ({"bucket": "ok-bucket", "prefix": "a/*"}, "trainstack:dataAccess[0].prefix"),
        ({"bucket": "ok-bucket", "kmsKeyArn": "alias/x"}, "trainstack:dataAccess[0].kmsKeyArn"),
        ({"bucket": "ok-bucket", "acess": "read"}, "trainstack:dataAccess[0].acess"),
    ],
)
def test_bad_data_access_is_one_line_naming_the_key(entry, key):
    values = {k.split(":", 1)[1]: v for k, v in stack_file_config("dev").items()}
    values = {k: v for k, v in values.items() if k != "region"}
    values["dataAccess"] = json.dumps([entry])
    with pytest.raises(ConfigError, match=re.escape(key)):
        parse_stack_config(values, "dev", "us-east-1")
