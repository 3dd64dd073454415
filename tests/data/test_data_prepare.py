"""`data prepare` on this machine: sources (plain, .gz, .zst, globs, directories, s3://),
formats and masks, dtypes, the commit, idempotence, and bad input. Datasets are read back with
numpy straight from the format (tests/data/prepared.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.data.prepared import load, read_local, read_s3, texts, write_jsonl
from trainer.data.prepare.__main__ import main as prepare_main

EVERY = 20  # eval_fraction 0.05: the 20th, 40th, ... document of each source is held out


def run(to, path, capsys=None, **data) -> tuple[int, str, str]:
    body = {"path": str(path), "tokenizer": "byte", **data}
    argv = ["--to", str(to), "--data", json.dumps(body), "--workers", "2", "--chunk-mb", "0.002"]
    code = prepare_main(argv)
    out, err = capsys.readouterr() if capsys else ("", "")
    return code, out, err


def byte_doc(text: str) -> list[int]:
    return [*text.encode(), 256]


def expected_splits(per_source: list[list[str]]) -> tuple[list, list]:
    train, held_out = [], []
    for source in per_source:
        for index, text in enumerate(t for t in source if t):
            (held_out if index % EVERY == EVERY - 1 else train).append(byte_doc(text))
    return train, held_out


def docs_of(root_reader, split):
    manifest, docs, masks = load(root_reader, split)
    return manifest, [d.tolist() for d in docs], masks


def test_plain_gz_zst_through_a_glob_in_source_order(tmp_path, capsys):
    corpus = [texts(70, seed) for seed in range(3)]
    write_jsonl(tmp_path / "in/a.jsonl", [{"text": t} for t in corpus[0]])
    write_jsonl(tmp_path / "in/b.jsonl.gz", [{"text": t} for t in corpus[1]], "gz")
    write_jsonl(tmp_path / "in/sub/c.jsonl.zst", [{"text": t} for t in corpus[2]], "zst")
    (tmp_path / "in/notes.txt").write_text("not a source")

    code, out, err = run(tmp_path / "out", tmp_path / "in/**/*.jsonl*", capsys)
    assert code == 0, err
    assert "committed" in out and out.count("\n") == 1
    manifest, train, _ = docs_of(read_local(tmp_path / "out"), "train")
    _, held_out, masks = docs_of(read_local(tmp_path / "out"), "eval")
    want_train, want_eval = expected_splits(corpus)
    assert (train, held_out) == (want_train, want_eval)
    assert [Path(s.uri).name for s in manifest.sources] == ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst"]
    assert manifest.dtype == "uint16" and manifest.tokenizer_fingerprint == "byte-v1"
    assert masks == [None] * len(held_out)
    assert len(manifest.split("train")) > 3  # small chunks: several shards per source, in order

    # A directory names the same sources; a re-run into another output gives the same dataset.
    assert run(tmp_path / "out2", tmp_path / "in", capsys)[0] == 0
    again, train2, _ = docs_of(read_local(tmp_path / "out2"), "train")
    assert train2 == train and again.sources == manifest.sources


def test_rerun_on_unchanged_sources_writes_nothing(tmp_path, capsys):
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts(50)])
    assert run(tmp_path / "out", tmp_path / "a.jsonl", capsys)[0] == 0
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")}

    code, out, _ = run(tmp_path / "out", tmp_path / "a.jsonl", capsys)
    assert code == 0 and "nothing to do" in out
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")} == before

    # A touched source (new mtime) is another dataset: refused, the committed one untouched.
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts(51)])
    code, _, err = run(tmp_path / "out", tmp_path / "a.jsonl", capsys)
    assert code == 2 and "other sources" in err
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")} == before


def test_a_different_tokenizer_is_a_different_dataset(tmp_path, capsys):
    from tests.trainer.hf_tokenizers import llama3_style

    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts(30)])
    assert run(tmp_path / "out", tmp_path / "a.jsonl", capsys)[0] == 0
    manifest_before = (tmp_path / "out/manifest.json").read_bytes()
    tokenizer = llama3_style(tmp_path / "tok")

    code, out, err = run(tmp_path / "out", tmp_path / "a.jsonl", capsys, tokenizer=str(tokenizer))
    assert code == 2 and out == ""
    assert "different tokenizer" in err and err.count("\n") == 1
    assert (tmp_path / "out/manifest.json").read_bytes() == manifest_before

    assert run(tmp_path / "out-hf", tmp_path / "a.jsonl", capsys, tokenizer=str(tokenizer))[0] == 0
    hf = json.loads((tmp_path / "out-hf/manifest.json").read_text())
    assert hf["tokenizer_fingerprint"].startswith("sha256:")


def test_hugging_face_batch_encoding_frames_documents_like_the_trainer(tmp_path, capsys):
    from tests.trainer.hf_tokenizers import llama3_style
    from trainer.tokenizer import build_tokenizer

    corpus = texts(60, seed=4)
    write_jsonl(tmp_path / "a.jsonl", [{"body": t} for t in corpus])
    directory = llama3_style(tmp_path / "tok")
    code, _, err = run(
        tmp_path / "out", tmp_path / "a.jsonl", capsys, tokenizer=str(directory), text_field="body"
    )
    assert code == 0, err
    tokenizer = build_tokenizer(str(directory), 1 << 20)
    want = [tokenizer.encode_document(t).tolist() for t in corpus]
    _, train, _ = docs_of(read_local(tmp_path / "out"), "train")
    _, held_out, _ = docs_of(read_local(tmp_path / "out"), "eval")
    assert train == [d for i, d in enumerate(want) if i % EVERY != EVERY - 1]
    assert held_out == [d for i, d in enumerate(want) if i % EVERY == EVERY - 1]


@pytest.mark.parametrize("data_format", ["chat", "prompt_completion"])
def test_instruction_formats_keep_their_loss_mask_bits(tmp_path, capsys, data_format):
    from contract.config import DataConfig
    from tests.trainer.hf_tokenizers import mistral_style
    from trainer.data.formats import build_format
    from trainer.tokenizer import build_tokenizer

    directory = mistral_style(tmp_path / "tok")
    prompts, replies = texts(45, seed=1, words=8), texts(45, seed=2, words=12)
    if data_format == "chat":
        records = [
            {"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": r}]}
            for p, r in zip(prompts, replies, strict=True)
        ]
    else:
        records = [{"prompt": p, "completion": r} for p, r in zip(prompts, replies, strict=True)]
    write_jsonl(tmp_path / "a.jsonl", records)
    code, _, err = run(
        tmp_path / "out", tmp_path / "a.jsonl", capsys, tokenizer=str(directory), format=data_format
    )
    assert code == 0, err

    cfg = DataConfig(path="", format=data_format, tokenizer=str(directory))
    form = build_format(cfg, build_tokenizer(str(directory), 1 << 20))
    want = [form.extract(r) for r in records]
    manifest, train, masks = docs_of(read_local(tmp_path / "out"), "train")
    kept = [d for i, d in enumerate(want) if i % EVERY != EVERY - 1]
    assert train == [d.tokens.tolist() for d in kept]
    assert [m.tolist() for m in masks] == [d.loss_mask.tolist() for d in kept]
    assert manifest.isolate_documents and all(s.has_mask for s in manifest.shards)
    assert any(not m.all() and m.any() for m in masks)  # prompts masked out, replies kept


def test_a_vocabulary_past_65536_ids_is_stored_as_uint32(tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(70_000)}
    words["<eos>"] = 70_000
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["<eos>"])
    (tmp_path / "tok").mkdir()
    tokenizer.save(str(tmp_path / "tok/tokenizer.json"))
    (tmp_path / "tok/tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>"}))
    write_jsonl(tmp_path / "a.jsonl", [{"text": "w1 w65535 w65536 w69999"}])
    code, _, err = run(
        tmp_path / "out", tmp_path / "a.jsonl", capsys, tokenizer=str(tmp_path / "tok")
    )
    assert code == 0, err
    manifest, train, _ = docs_of(read_local(tmp_path / "out"), "train")
    assert manifest.dtype == "uint32" and manifest.vocab_size == 70_001
    assert train == [[1, 65535, 65536, 69999, 70_000]]


def test_s3_prefix_in_and_out_and_an_idempotent_rerun(tmp_path, capsys, s3_direct, s3_bucket):
    client = s3_direct.client()
    corpus = [texts(40, 7), texts(30, 8)]
    for name, part in zip(("in/a.jsonl.gz", "in/b/c.jsonl"), corpus, strict=True):
        local = write_jsonl(
            tmp_path / name, [{"text": t} for t in part], "gz" * name.endswith("gz")
        )
        client.put_object(Bucket=s3_bucket, Key=name, Body=local.read_bytes())
    client.put_object(Bucket=s3_bucket, Key="in/README.md", Body=b"not a source")
    to = f"s3://{s3_bucket}/datasets/web"

    code, out, err = run(to, f"s3://{s3_bucket}/in/", capsys)
    assert code == 0, err
    reader = read_s3(client, s3_bucket, "datasets/web")
    manifest, train, _ = docs_of(reader, "train")
    _, held_out, _ = docs_of(reader, "eval")
    assert (train, held_out) == expected_splits(corpus)
    assert [s.version for s in manifest.sources] == [
        client.head_object(Bucket=s3_bucket, Key=k)["ETag"].strip('"')
        for k in ("in/a.jsonl.gz", "in/b/c.jsonl")
    ]

    def listing():
        objects = client.list_objects_v2(Bucket=s3_bucket, Prefix="datasets/")["Contents"]
        return {o["Key"]: (o["ETag"], o["LastModified"]) for o in objects}

    before = listing()
    assert not any("_prepare" in key for key in before)
    code, out, _ = run(to, f"s3://{s3_bucket}/in/", capsys)
    assert code == 0 and "nothing to do" in out
    assert listing() == before


def test_slices_commit_only_once_every_slice_landed(tmp_path, capsys):
    from contract.config import DataConfig
    from trainer.data.prepare import PrepareRequest, prepare, run_slice

    for index in range(4):
        write_jsonl(tmp_path / f"in/{index}.jsonl", [{"text": t} for t in texts(25, index)])
    data = DataConfig(path=str(tmp_path / "in"), tokenizer="byte")
    sliced = PrepareRequest(data, str(tmp_path / "sliced"), slices=2, workers=1, chunk_mb=0.002)

    first = run_slice(sliced, 1)
    assert not first.committed and not (tmp_path / "sliced/manifest.json").exists()
    assert (tmp_path / "sliced/_prepare").is_dir()
    again = run_slice(sliced, 1)  # a retried index whose work landed: nothing to redo
    assert again.nothing_to_do
    last = run_slice(sliced, 0)
    assert last.committed and not (tmp_path / "sliced/_prepare").exists()

    whole = PrepareRequest(data, str(tmp_path / "whole"), slices=1, workers=2, chunk_mb=0.002)
    prepare(whole, progress=False)
    committed = (tmp_path / "sliced/manifest.json").read_text()
    assert committed == (tmp_path / "whole/manifest.json").read_text()


def _corrupt_gz(path: Path) -> None:
    write_jsonl(path, [{"text": t} for t in texts(200)], "gz")
    path.write_bytes(path.read_bytes()[:-40])  # truncated: no end-of-stream


def _corrupt_zst(path: Path) -> None:
    path.write_bytes(b"(\xb5/\xfd" + bytes(range(256)) * 4)


def _malformed(path: Path) -> None:
    write_jsonl(path, [{"text": "fine"}] * 90 + ["{not json"] * 5 + [{"other": 1}] * 5)


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("b.jsonl.gz", _corrupt_gz, "is corrupt or truncated"),
        ("b.jsonl.zst", _corrupt_zst, "is corrupt or truncated"),
        ("b.jsonl", _malformed, "10 of 100 lines"),
    ],
)
def test_bad_sources_fail_with_one_line_and_nothing_committed(tmp_path, capsys, name, make, says):
    write_jsonl(tmp_path / "in/a.jsonl", [{"text": t} for t in texts(300)])  # fine, first
    make(tmp_path / "in" / name)
    code, out, err = run(tmp_path / "out", tmp_path / "in", capsys)
    assert code == 2 and out == ""
    assert err.startswith("data prepare: data.path: ") and err.count("\n") == 1
    assert says in err and name in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == []  # a.jsonl's shards removed


def test_no_matching_files_and_an_unreadable_s3_prefix(tmp_path, capsys, s3_direct):
    code, _, err = run(tmp_path / "out", tmp_path / "nothing/*.jsonl", capsys)
    assert code == 2 and "matches no JSONL file" in err and err.count("\n") == 1
    code, _, err = run(tmp_path / "out", "s3://no-such-bucket-here/in/", capsys)
    assert code == 2 and "cannot list 's3://no-such-bucket-here/in/'" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

    write_jsonl(tmp_path / "empty.jsonl", [{"text": ""}] * 10)
    code, _, err = run(tmp_path / "out", tmp_path / "empty.jsonl", capsys)
    assert code == 2 and "hold no documents" in err and err.count("\n") == 1
    assert not any((tmp_path / "out").iterdir())

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy/notes.md").write_text("mine")
    code, _, err = run(tmp_path / "busy", tmp_path / "empty.jsonl", capsys)
    assert code == 2 and "holds other files (first: 'notes.md')" in err
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["notes.md"]


def test_the_cli_prepares_here_by_default(tmp_path, capsys, monkeypatch):
    from jobs.cli import main

    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts(30)])
    monkeypatch.chdir(tmp_path)
    code = main(["data", "prepare", "--to", "out", "data.path=a.jsonl", "data.tokenizer=byte"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("data prepare: 1 sources") and (tmp_path / "out/manifest.json").exists()
    code = main(["data", "prepare", "--to", "out", "data.path=a.jsonl", "data.format=chats"])
    assert code == 2
    assert capsys.readouterr().err.startswith("trainstack data prepare: data.format: 'chats'")


def test_the_module_entry_runs_one_index_and_finalize_waits_for_every_slice(tmp_path, capsys):
    for index in range(3):
        write_jsonl(tmp_path / f"in/{index}.jsonl", [{"text": t} for t in texts(20, index)])
    body = json.dumps({"path": str(tmp_path / "in"), "tokenizer": "byte"})
    base = ["--to", str(tmp_path / "out"), "--data", body, "--slices", "2", "--workers", "1"]

    assert prepare_main([*base, "--index", "0"]) == 0
    assert "slice landed, others pending" in capsys.readouterr().out
    assert prepare_main([*base, "--finalize"]) == 2
    err = capsys.readouterr().err
    assert "slices [1] of 2 have not finished" in err and err.count("\n") == 1
    assert not (tmp_path / "out/manifest.json").exists()

    assert prepare_main([*base, "--index", "1"]) == 0
    assert "committed" in capsys.readouterr().out
    assert prepare_main([*base, "--finalize"]) == 0  # already committed: nothing to do
    assert "nothing to do" in capsys.readouterr().out


def test_an_s3_tokenizer_is_fetched_once_and_fingerprints_like_its_local_copy(
    tmp_path, capsys, s3_direct, s3_bucket
):
    from tests.trainer.hf_tokenizers import llama3_style

    client = s3_direct.client()
    local = llama3_style(tmp_path / "tok")
    for file in sorted(Path(local).iterdir()):
        client.put_object(Bucket=s3_bucket, Key=f"tok/{file.name}", Body=file.read_bytes())
    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts(30, 3)])

    assert run(tmp_path / "from-local", tmp_path / "a.jsonl", capsys, tokenizer=str(local))[0] == 0
    code, _, err = run(
        tmp_path / "from-s3", tmp_path / "a.jsonl", capsys, tokenizer=f"s3://{s3_bucket}/tok"
    )
    assert code == 0, err
    from_local, from_s3 = (
        json.loads((tmp_path / name / "manifest.json").read_text())
        for name in ("from-local", "from-s3")
    )
    assert from_s3["tokenizer_fingerprint"] == from_local["tokenizer_fingerprint"]
    assert from_s3["tokens"] == from_local["tokens"]
