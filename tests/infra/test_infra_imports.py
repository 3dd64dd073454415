"""`pulumi up` loads the program's modules: they read the contract, the catalog and the runtime
renderer, never the trainer (torch-free or not) or jobs' launch pipeline (issue 34). Of `jobs`,
exactly the runtime renderer and the light modules it stands on (JOBS_LOADED)."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PIPELINE = ("jobs.app", "jobs.launch", "jobs.sweep", "jobs.materialize", "jobs.validate")
JOBS_LOADED = {
    "jobs",
    "jobs.backend_registry",
    "jobs.backend_registry.traits",
    "jobs.backends",
    "jobs.backends.kubernetes",
    "jobs.backends.kubernetes.client",
    "jobs.backends.kubernetes.client.kinds",
    "jobs.backends.kubernetes.client.state",  # manifest_checks' node count of a job (pure)
    "jobs.backends.kubernetes.manifest_checks",  # check_jobset_webhook
    "jobs.backends.kubernetes.pod_facts",
    "jobs.backends.kubernetes.pod_parts",
    "jobs.backends.kubernetes.rayjob_checks",  # manifest_checks' Kueue/KubeRay rules (no imports)
    "jobs.backends.kubernetes.runtimes",
    "jobs.naming",  # manifest_checks' run id rules
}
"""The `jobs` modules the program loads (19 with jobs.spec on the path, which brought the
runners, the schema and the run dirs along; 12 since the runtime renderer reads pod_facts; 13
since the backend registry, which was jobs/backends/'s `__init__`, has its own package; 14 with
the RayJob rules manifest_checks reads)."""


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
    assert "infra.kubeflow_trainer" in loaded and "jobs.backends.kubernetes.runtimes" in loaded
    assert not {m for m in loaded if m == "trainer" or m.startswith("trainer.")}
    assert not {m for m in loaded if m.startswith(PIPELINE) or m.startswith("jobs.api")}
    assert "torch" not in loaded


def test_the_program_loads_only_the_runtime_renderer_of_jobs():
    loaded = {m for m in loaded_by_the_program() if m == "jobs" or m.startswith("jobs.")}
    assert loaded == JOBS_LOADED, f"new: {sorted(loaded - JOBS_LOADED)}"
