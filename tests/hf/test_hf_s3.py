"""The same over S3 (moto's server): model.init_from=s3://..., a run dir on S3, and
`trainstack export ... --to s3://...`; an export cut short never looks complete. An s3://
init_from is read by ranges: each rank fetches about its share of the weights (bytes per rank
counted by the proxy), and the logits equal the local directory's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import trainer.hf.export as export_module
from contract.checkpoints import step_dir
from testing_support.hf_models import assert_close, build_llama, fixed_batch, hf_logits, word_corpus
from testing_support.s3_server import FaultProxy, s3_env
from tests.hf.test_hf_finetune_export import finetune_args
from tests.hf.test_hf_load import trainer_logits
from trainer.hf.export import export_run
from trainer.hf.s3_weights import HEADER_PROBE
from trainer.storage import S3Storage


@pytest.mark.slow
def test_init_from_and_export_over_s3(tmp_path: Path, s3_direct, s3_bucket, run_trainer, capsys):
    from jobs.cli import main

    source = build_llama(tmp_path / "hf", tied=True)
    model_uri = f"s3://{s3_bucket}/models/tiny-llama"
    S3Storage(f"s3://{s3_bucket}/models").upload_dir(source, "tiny-llama")
    run_dir = f"s3://{s3_bucket}/runs/sft"
    corpus = word_corpus(tmp_path / "words.jsonl")
    result = run_trainer(
        2, finetune_args(model_uri, corpus), run_dir=run_dir, env=s3_env(s3_direct.url),
        small=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"initialized from {model_uri}" in result.stdout

    export_uri = f"s3://{s3_bucket}/exports/sft"
    code = main(["export", run_dir, "--to", export_uri, "--dtype", "fp32"])
    assert code == 0, capsys.readouterr().err
    assert "exported step 3" in capsys.readouterr().out
    exported = tmp_path / "exported"
    S3Storage(export_uri).download_dir("", exported)
    assert (exported / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()

    local_run = tmp_path / "run-copy"
    S3Storage(run_dir).download_dir(step_dir(3), local_run / step_dir(3))
    trained = trainer_logits(tmp_path, 1, "checkpoint", str(source), str(local_run), "3")
    assert_close(hf_logits(exported, fixed_batch()), trained)
    # Round trip straight from S3.
    assert_close(trainer_logits(tmp_path, 1, "init", export_uri), trained)

    # An export that fails after its first shard leaves nothing that looks like a model.
    real_save = export_module._save_shard
    calls: list[Path] = []

    def failing_save(tensors, path):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full (injected)")
        real_save(tensors, path)

    export_module._save_shard = failing_save
    try:
        for dest in (str(tmp_path / "cut-short"), f"s3://{s3_bucket}/exports/cut-short"):
            calls.clear()
            with pytest.raises(OSError, match="injected"):
                export_run(run_dir, dest, dtype="fp32", max_shard_bytes=20_000)
            assert len(calls) == 2
            if dest.startswith("s3://"):
                assert "config.json" not in S3Storage(dest).list_dir("")
            else:
                assert not Path(dest).exists()
                assert not list(tmp_path.glob(".cut-short*"))
    finally:
        export_module._save_shard = real_save


@pytest.mark.slow
def test_init_from_s3_reads_each_ranks_share_by_ranges(
    tmp_path: Path, fault_proxy: FaultProxy, s3_bucket: str
):
    source = build_llama(
        tmp_path / "hf", tied=False, max_shard_size="2MB", hidden_size=256,
        intermediate_size=688,
    )  # fmt: skip
    files = sorted(source.glob("model-*.safetensors"))
    assert len(files) > 2
    S3Storage(f"s3://{s3_bucket}/models").upload_dir(source, "llama")
    weight_bytes = sum(f.stat().st_size for f in files)

    before = len(fault_proxy.transfers)
    remote = trainer_logits(tmp_path, 2, "init", f"s3://{s3_bucket}/models/llama")
    read = {}
    for t in fault_proxy.transfers[before:]:
        if t.method == "GET" and t.path.endswith(".safetensors"):
            read[t.rank] = read.get(t.rank, 0) + t.received
    assert set(read) == {0, 1}, read
    # Each rank: about its half of the weights, plus one header probe per file; nothing whole.
    limit = 1.2 * weight_bytes / 2 + len(files) * HEADER_PROBE
    for rank, nbytes in read.items():
        assert weight_bytes / 2 * 0.8 < nbytes <= limit, (rank, nbytes, weight_bytes)
    assert torch.equal(remote, trainer_logits(tmp_path, 2, "init", str(source)))
