"""The same over S3 (moto's server): model.init_from=s3://..., a run dir on S3, and
`trainstack export ... --to s3://...`; an export cut short never looks complete."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainer.hf.export as export_module
from tests.hf.models import assert_close, build_llama, fixed_batch, hf_logits
from tests.hf.test_hf_finetune_export import finetune_args, word_corpus
from tests.hf.test_hf_load import trainer_logits
from tests.s3_server import s3_env
from trainer.checkpoint import step_dir
from trainer.hf.export import export_run
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
