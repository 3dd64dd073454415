"""Every `trainstack` command in README.md runs as written on a fresh checkout.

The commands are taken from the README's fenced shell blocks (```bash / sh / shell / console),
continuation lines joined. Each is one of:

- **needs a cluster**: its comment says so (`... # needs a cluster`, or `(needs a cluster)`
  inside the comment): it talks to a Kubernetes API, S3 or a stack's outputs. Skipped.
- **usage**: a synopsis, not a command: `...`, `[optional]`, `a | b` or an upper-case
  placeholder (`RUN`, `ID`, `DIR`) after `trainstack`. Its subcommand must exist
  (`trainstack <command> --help` exits 0).
- **walkthrough**: a block whose first line is `# walkthrough` runs whole, in order, for real
  (no `--dryrun`) as one bash script with `set -e`, in one such directory: the newcomer's path
  (train, list, resume, sweep, render; your own script, its relaunch and sweep) works end to
  end, each step on what the previous one left, with only the `local` extra `make run`
  installs importable (tests/only_extra) and no AWS credentials; `# walkthrough (...)` with
  more words names extras beyond it and runs in the whole venv.
- **runnable**: everything else. `<placeholders>` are replaced from PLACEHOLDERS (an unknown
  one fails this test: add it there or mark the line), `trainstack launch` gets `--dryrun`
  (nothing trains or is written), and the whole line runs through bash, from a temporary
  directory holding a copy of the checkout's `data/` (relative paths resolve as in the
  checkout; nothing reaches the checkout). It must exit 0, and a launch must leave that
  directory as it was.

The same holds for every Markdown file in `docs/`. A section added later is covered without
touching this file, as long as its commands follow these conventions.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
WALKTHROUGH = "# walkthrough"
FENCE = re.compile(r"^```(?:bash|sh|shell|console)\s*\n(.*?)^```", re.S | re.M)
CLUSTER_MARK = re.compile(r"needs a cluster")
PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>")
USAGE_WORD = re.compile(r"^[A-Z][A-Z_]*$")
PLACEHOLDERS = {
    "<repo>": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/trainer",
    "<tag>": "v1",
    "<bucket>": "trainstack-readme",
    "<tokenizer dir>": "{tokenizer_dir}",
}


@dataclass(frozen=True)
class Command:
    line: int
    text: str
    walkthrough: bool = False
    source: str = "README.md"
    """The command with continuations joined, comment included."""

    @property
    def code(self) -> str:
        """The text before its comment (` #` outside quotes)."""
        return self.text[: comment_start(self.text)]

    @property
    def comment(self) -> str:
        return self.text[len(self.code) :]

    @property
    def trainstack_args(self) -> list[str]:
        """The words after `trainstack` (in a pipeline, its trainstack part)."""
        words = self.code.split()
        return words[words.index("trainstack") + 1 :]

    @property
    def kind(self) -> str:
        if self.walkthrough:
            return "walkthrough"
        if CLUSTER_MARK.search(self.comment):
            return "cluster"
        args = self.trainstack_args
        usage = any(w == "..." or w.startswith("[") or w == "|" for w in args)
        if usage or any(USAGE_WORD.match(w) for w in args):
            return "usage"
        return "run"


def comment_start(line: str) -> int:
    """Index of a shell comment's `#` (preceded by whitespace, outside quotes), else len."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and i > 0 and line[i - 1].isspace():
            return i
    return len(line)


def readme_commands(text: str, source: str = "README.md") -> list[Command]:
    commands = []
    for block in FENCE.finditer(text):
        first_line = text[: block.start(1)].count("\n") + 1
        walkthrough = block.group(1).lstrip().startswith(WALKTHROUGH)
        joined, start = "", None
        for offset, raw in enumerate(block.group(1).splitlines()):
            start = first_line + offset if start is None else start
            code_part = raw[: comment_start(raw)]
            if code_part.rstrip().endswith("\\"):
                joined += code_part.rstrip()[:-1] + " "
                continue
            joined += raw
            words = re.split(r"[\s|;&]+", joined.strip())
            if "trainstack" in words:
                text_ = re.sub(r"\s+", " ", joined.strip())
                commands.append(Command(start, text_, walkthrough, source))
            joined, start = "", None
    return commands


COMMANDS = [c for doc in DOCS for c in readme_commands(doc.read_text(), doc.name)]
WALKTHROUGHS = [
    block.group(1)
    for doc in DOCS
    for block in FENCE.finditer(doc.read_text())
    if block.group(1).lstrip().startswith(WALKTHROUGH)
]


def test_the_readme_has_commands_of_each_kind():
    kinds = {c.kind for c in COMMANDS}
    assert kinds == {"cluster", "usage", "run", "walkthrough"}, kinds
    assert sum(c.kind == "run" for c in COMMANDS) >= 5


def test_the_extractor_reads_the_conventions():
    text = """
```bash
trainstack launch -m a=1,2 \\
  b=x   # two points
trainstack launch stack=dev backend=kubernetes   # submit (needs a cluster)
trainstack status RUN     # usage
echo -n "$T" | trainstack serve --hash-token
```
```python
trainstack launch not-shell
```
"""
    found = [(c.line, c.kind, c.code.strip()) for c in readme_commands(text)]
    assert found == [
        (3, "run", "trainstack launch -m a=1,2 b=x"),
        (5, "cluster", "trainstack launch stack=dev backend=kubernetes"),
        (6, "usage", "trainstack status RUN"),
        (7, "run", 'echo -n "$T" | trainstack serve --hash-token'),
    ]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from testing_support.hf_models import write_tokenizer

    out = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer(out, 300)
    return out


@pytest.fixture
def checkout_dir(tmp_path: Path) -> Path:
    """A working directory that looks like the checkout to relative paths (a copy of data/)."""
    shutil.copytree(REPO / "data", tmp_path / "data")
    return tmp_path


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def runnable(command: Command, tokenizer_dir: Path) -> str:
    code = command.code
    unknown = sorted(set(PLACEHOLDER.findall(code)) - set(PLACEHOLDERS))
    assert not unknown, (
        f"README line {command.line}: placeholders {unknown} in a runnable command; add them "
        f"to PLACEHOLDERS in {Path(__file__).name} or mark the line '# needs a cluster'"
    )
    for name, value in PLACEHOLDERS.items():
        code = code.replace(name, value.format(tokenizer_dir=tokenizer_dir))
    if "trainstack launch" in code and "--dryrun" not in code:
        code = code.replace("trainstack launch", "trainstack launch --dryrun", 1)
    return code


ONLY_EXTRA = Path(__file__).parent / "only_extra"
NO_AWS = {
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@functools.cache
def only_extra_env(extra: str) -> dict[str, str]:
    """The environment that hides what `extra` leaves out, with the hidden set computed here
    once (tests/only_extra/sitecustomize.py, BLOCKED_ENV) instead of in each of the walkthrough's
    dozens of processes."""
    spec = importlib.util.spec_from_file_location(
        "only_extra_site", ONLY_EXTRA / "sitecustomize.py"
    )
    assert spec is not None and spec.loader is not None
    site = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site)
    return {"TRAINSTACK_ONLY_EXTRA": extra, site.BLOCKED_ENV: site.blocked_env(extra)}


def run_shell(code: str, cwd: Path, extra: str | None = None) -> subprocess.CompletedProcess:
    """`code` through bash; with `extra`, as in a venv holding only that extra, and without
    AWS credentials."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["TOKEN"] = "readme-test-token-at-least-32-characters"
    if extra is not None:
        env = {k: v for k, v in env.items() if not k.startswith("AWS_")} | NO_AWS
        env |= only_extra_env(extra)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ONLY_EXTRA), env.get("PYTHONPATH")]))
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {code}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if c.kind == "run"], ids=lambda c: f"line{c.line}"
)
def test_runnable_readme_command(command: Command, tokenizer_dir: Path, checkout_dir: Path):
    code = runnable(command, tokenizer_dir)
    before = listing(checkout_dir)
    result = run_shell(code, checkout_dir)
    assert result.returncode == 0, (
        f"{command.source} line {command.line}: {code}\n"
        f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    )
    if "trainstack launch --dryrun" in code and code.count("trainstack ") == 1:
        # (a line that also prepares data writes on purpose before its dry-run launch)
        assert listing(checkout_dir) == before


@pytest.mark.parametrize(
    "subcommand",
    sorted({c.trainstack_args[0] for c in COMMANDS if c.kind == "usage"}),
)
def test_usage_lines_name_real_commands(subcommand: str, checkout_dir: Path):
    result = run_shell(f"trainstack {subcommand} --help", checkout_dir)
    assert result.returncode == 0, result.stderr
    assert f"trainstack {subcommand}" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("block", WALKTHROUGHS, ids=lambda b: b.splitlines()[1][:40])
def test_walkthrough_runs_in_order(block: str, checkout_dir: Path):
    """The newcomer's path: every step for real, each on what the steps before it left."""
    script = "set -e\n" + block
    # `# walkthrough` alone: the newcomer's `local` extra; `# walkthrough (...)` names more
    # (the eval extra) and runs in the whole venv `make test` installs.
    extra = "local" if block.lstrip().splitlines()[0].strip() == WALKTHROUGH else None
    if extra is None:  # lm-eval's datasets cache goes to the test's dir, never ~/.cache
        script = f"export HF_HOME={checkout_dir}/.hf HF_DATASETS_OFFLINE=1\n{script}"
    result = run_shell(script, checkout_dir, extra=extra)
    assert result.returncode == 0, f"{block}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Setting OMP_NUM_THREADS" not in result.stdout + result.stderr  # torchrun's 4 lines
    launched = re.findall(r"trainstack launch[^\n]*run_id=(\S+)", block)
    for run_id in launched:
        assert (checkout_dir / "runs" / run_id).is_dir(), run_id
    if "backend=render" in block:  # a rendered run is listed as such
        assert "rendered" in result.stdout
