"""Two small lm-eval tasks written here (nothing downloaded): a multiple-choice one scored by
log-likelihood and a generation one scored by exact match, as local task YAMLs reading JSONL
through `dataset_path: json` with absolute `data_files` (how lm-eval runs offline)."""

from __future__ import annotations

import json
from pathlib import Path

MC_TASK = "ts_mc"
GEN_TASK = "ts_gen"
WORDS = ["time", "king", "queen", "river", "house", "night", "water", "light"]


def write_tasks(directory: Path, docs: int = 8) -> Path:
    """`directory` with ts_mc.yaml, ts_gen.yaml and their JSONL data: `docs` documents each."""
    directory.mkdir(parents=True, exist_ok=True)
    mc = [
        {
            "question": f"Once upon a {WORDS[i % len(WORDS)]} there was a",
            "choices": ["king", "queen", "river", "the"],
            "answer": i % 4,
        }
        for i in range(docs)
    ]
    gen = [{"prompt": f"The {WORDS[i % len(WORDS)]} was", "answer": "the"} for i in range(docs)]
    for name, rows in (("mc", mc), ("gen", gen)):
        (directory / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = "dataset_path: json\ntest_split: test\n"
    (directory / f"{MC_TASK}.yaml").write_text(
        f"task: {MC_TASK}\n{common}"
        f"dataset_kwargs:\n  data_files:\n    test: {directory.resolve() / 'mc.jsonl'}\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n"
    )
    (directory / f"{GEN_TASK}.yaml").write_text(
        f"task: {GEN_TASK}\n{common}"
        f"dataset_kwargs:\n  data_files:\n    test: {directory.resolve() / 'gen.jsonl'}\n"
        "output_type: generate_until\n"
        'doc_to_text: "{{prompt}}"\n'
        'doc_to_target: "{{answer}}"\n'
        'generation_kwargs:\n  until: ["\\n", "."]\n  max_gen_toks: 8\n  do_sample: false\n'
        "metric_list:\n  - metric: exact_match\n"
    )
    return directory
