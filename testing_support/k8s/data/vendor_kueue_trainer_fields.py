"""Writes kueue_trainer_fields.json: the TrainJob fields Kueue's vendored Kubeflow Trainer types
can hold, as a tree of JSON names ("*": a Kubernetes type, kept whole).

Kueue updates a whole TrainJob with these types on admission and preemption
(kubernetes-sigs/kueue, pkg/controller/jobs/trainjob/trainjob_controller.go,
`RunWithPodSetsInfo` and `Stop`: `c.Update(ctx, t.Object())`), so a field they lack is dropped.
Re-run when infra/settings/versions.py's KUEUE pin changes:

    python testing_support/k8s/data/vendor_kueue_trainer_fields.py <kueue git dir> <tag>
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

TYPES_FILE = "vendor/github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1/trainjob_types.go"
FIELD = re.compile(r"^\s+(\w+)\s+(\S+)\s+`json:\"([^,\"]*)")
STRUCT = re.compile(r"^type (\w+) struct \{")


def structs(source: str) -> dict[str, dict[str, str]]:
    """Every struct of `source`: {type name: {json name: Go type}} (inline fields skipped)."""
    found: dict[str, dict[str, str]] = {}
    current = None
    for line in source.splitlines():
        if match := STRUCT.match(line):
            current = found.setdefault(match[1], {})
        elif line.startswith("}"):
            current = None
        elif current is not None and (match := FIELD.match(line)) and match[3]:
            current[match[3]] = match[2]
    return found


def tree(name: str, types: dict[str, dict[str, str]]) -> dict | str:
    """The JSON-name tree of Go type `name`; "*" for a type not defined here."""
    bare = name.lstrip("[]*")
    if bare not in types:
        return "*"
    return {field: tree(go_type, types) for field, go_type in sorted(types[bare].items())}


def main(git_dir: str, tag: str) -> None:
    def show(path: str) -> str:
        return subprocess.run(
            ["git", "-C", git_dir, "show", f"{tag}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    trainer = next(
        line.split()[-1]
        for line in show("go.mod").splitlines()
        if line.strip().startswith("github.com/kubeflow/trainer/v2 ")
    )
    commit = subprocess.run(
        ["git", "-C", git_dir, "rev-list", "-n1", tag],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    types = structs(show(TYPES_FILE))
    out = {
        "source": {
            "repo": "kubernetes-sigs/kueue",
            "tag": tag,
            "commit": commit,
            "go.mod": f"github.com/kubeflow/trainer/v2 {trainer}",
            "file": TYPES_FILE,
        },
        "kueue_version": tag.removeprefix("v"),
        "trainer_version": trainer,
        "trainjob": {"spec": tree("TrainJobSpec", types)},
    }
    path = Path(__file__).with_name("kueue_trainer_fields.json")
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
