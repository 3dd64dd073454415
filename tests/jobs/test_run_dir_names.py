"""The run dir's names are spelt once, in `contract/` (contract.run_dir, contract.checkpoints):
product code names `config.yaml`, `checkpoints/`, `step-N`, `job/`, `code/`,
`logs/metrics.jsonl` and `pod-starts/` through those constants, so a new layout is one edit.
Docstrings, and the messages listed below that show a user the layout, may spell them."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("contract", "jobs", "trainer", "hydra_plugins")
HOME = {"contract/run_dir.py", "contract/checkpoints.py"}
PARTS = ("metrics.jsonl", "config.yaml", "pod-starts", "checkpoints/", "/job/", "step-")
NAMES = {"config.yaml", "checkpoints", "job", "code", "pod-starts", "metrics.jsonl"}
ALLOWED = {  # (module, name): how many of its strings spell it
    # Messages that show the user a layout (bad input, a missing record).
    ("jobs/validate_inputs.py", "checkpoints/"): 1,
    ("jobs/validate_inputs.py", "step-"): 1,
    ("trainer/checkpoint/source.py", "checkpoints/"): 1,
    ("trainer/checkpoint/source.py", "step-"): 1,
    ("trainer/hf/export.py", "config.yaml"): 1,
    # The launcher's own syntax `trainer.resume_from=RUN[/step-N]` (it becomes step_dir(N)).
    ("jobs/resume_from.py", "step-"): 1,
    # The API's schema tells a client how an eval's folder is named.
    ("jobs/api/models.py", "step-"): 1,
    # Words that are not the run dir's: command names, a runner option key.
    ("jobs/completion.py", "checkpoints"): 1,
    ("jobs/commands/__init__.py", "checkpoints"): 1,
    ("jobs/commands/arguments.py", "checkpoints"): 1,
    ("jobs/commands/checkpoints.py", "checkpoints"): 1,
    ("jobs/runners/base.py", "code"): 1,
    ("trainer/serving/app.py", "code"): 1,  # an OpenAI error body's `code` field
}


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        for stmt in body if isinstance(body, list) else []:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                found.add(id(stmt.value))
    return found


def spelt(path: Path) -> Counter[str]:
    """How many of the module's strings (f-string parts too) spell each run-dir name or part."""
    tree = ast.parse(path.read_text())
    skip = docstrings(tree)
    seen: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            seen.update({part for part in PARTS if part in node.value} | ({node.value} & NAMES))
    return seen


def test_run_dir_names_are_spelt_in_the_contract_only():
    found = {}
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name not in HOME:
                found |= {(name, word): count for word, count in spelt(path).items()}
    over = {key: count for key, count in found.items() if count > ALLOWED.get(key, 0)}
    assert over == {}
