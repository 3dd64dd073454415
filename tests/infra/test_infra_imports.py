"""`pulumi up` loads the program's modules: they read the contract, the catalog and the runtime
renderer, never the trainer (torch-free or not) or jobs' launch pipeline (issue 34)."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PIPELINE = ("jobs.app", "jobs.launch", "jobs.sweep", "jobs.materialize", "jobs.validate")


def loaded_by_the_program() -> set[str]:
    """sys.modules after importing every module infra/__main__.py imports (running the program
    itself needs a Pulumi engine), in a fresh interpreter."""
    tree = ast.parse((REPO / "infra" / "__main__.py").read_text())
    names = sorted(
        {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    )
    code = "import importlib, sys\n"
    code += "".join(f"importlib.import_module({name!r})\n" for name in names)
    code += "print('\\n'.join(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


def test_the_program_loads_no_trainer_module_and_no_launch_pipeline():
    loaded = loaded_by_the_program()
    assert "infra.kubeflow_trainer" in loaded and "contract.config" in loaded
    assert not {m for m in loaded if m == "trainer" or m.startswith("trainer.")}
    assert not {m for m in loaded if m.startswith(PIPELINE) or m.startswith("jobs.api")}
    assert "torch" not in loaded
