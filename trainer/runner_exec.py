"""`python -m trainer.runner_exec --config PATH [--code URI --sha256 HEX --into DIR] -- PROGRAM`

What a job that runs someone else's program (runner=command, runner=hf) does first on each
node, before the program or its torchrun starts:

1. writes the run record `<run_dir>/config.yaml` (node 0; the `--config` file, which holds the
   runner section and the code's sha256), and creates every local directory the job contract
   names (TRAINSTACK_RUN_DIR, TRAINSTACK_CHECKPOINT_DIR, the one TRAINSTACK_METRICS is in);
2. with `--code`: fetches the workdir archive (local path or s3://), checks its sha256 and
   unpacks it into `--into` (once: a restart finds it there), then starts the program there.
   A missing or mismatching archive exits 2 (bad input: never retried, the same archive would
   fail the same way);
3. replaces itself with PROGRAM (signals and exit codes are the program's own) — except when
   the run dir is s3:// and TRAINSTACK_METRICS or TRAINSTACK_CHECKPOINT_DIR are local here:
   then it restores the checkpoints from the run dir, stays as the program's parent, forwards
   SIGTERM/SIGINT, and keeps both in step with the run dir (trainer.runner_sync).

Never imports jobs/: the trainer image carries trainer/ alone.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import sys
import tarfile
from pathlib import Path

import yaml

from contract.config import EXIT_BAD_INPUT, EXIT_FAILED
from contract.run_dir import CONFIG_FILE
from trainer.exec_program import exec_program
from trainer.runner_sync import CheckpointMirror, run_syncing, syncs_for
from trainer.storage import StorageNotFoundError, open_run_storage, read_uri_bytes

MARKER = ".trainstack-code"
"""Inside the unpacked tree: the sha256 it was unpacked from."""


def _say(message: str) -> None:
    print(f"[trainer.runner_exec] {message}", file=sys.stderr, flush=True)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: python -m trainer.runner_exec --config PATH [...] -- PROGRAM")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m trainer.runner_exec")
    parser.add_argument("--config", required=True)
    parser.add_argument("--code", help="URI of the workdir archive (.tar.gz)")
    parser.add_argument("--sha256", help="its expected sha256")
    parser.add_argument("--into", help="directory to unpack it into and start in")
    options = parser.parse_args(argv[:split])
    if options.code and not (options.sha256 and options.into):
        parser.error("--code needs --sha256 and --into")
    return options, argv[split + 1 :]


def write_record(config_text: str, run_dir: str) -> None:
    """Node 0 only (PET_NODE_RANK is the operator's; absent here: one node)."""
    if os.environ.get("PET_NODE_RANK", "0") != "0":
        return
    open_run_storage(run_dir).write_text(CONFIG_FILE, config_text)


class CodeError(Exception):
    """The archive is missing or not the one the job was launched with."""


def fetch(uri: str, sha256: str) -> bytes:
    try:
        data = read_uri_bytes(uri)
    except (StorageNotFoundError, FileNotFoundError):
        raise CodeError(f"runner.workdir archive {uri} is missing; launch the job again") from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise CodeError(
            f"runner.workdir archive {uri} has sha256 {got}, not {sha256} as launched: it was "
            "changed after launch; launch the job again"
        )
    return data


def unpack(data: bytes, sha256: str, into: Path) -> None:
    """Into `into`, atomically (a sibling then a rename); a tree already unpacked from the same
    archive is kept as is, one from another archive replaced."""
    marker = into / MARKER
    if marker.is_file() and marker.read_text().strip() == sha256:
        return
    staging = into.with_name(f"{into.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(staging, filter="data")  # no absolute paths, no escapes, no devices
    (staging / MARKER).write_text(sha256 + "\n")
    if into.exists():
        shutil.rmtree(into)
    os.replace(staging, into)


CONTRACT_DIRS = ("TRAINSTACK_RUN_DIR", "TRAINSTACK_CHECKPOINT_DIR")
CONTRACT_FILES = ("TRAINSTACK_METRICS",)


def make_contract_paths(environ: dict[str, str] | os._Environ[str]) -> None:
    """Every local path the contract names exists before the program starts: its directories,
    and the directory of its files (a program may open TRAINSTACK_METRICS straight away)."""
    for key in CONTRACT_DIRS + CONTRACT_FILES:
        value = environ.get(key, "")
        if value and "://" not in value:
            path = Path(value)
            (path if key in CONTRACT_DIRS else path.parent).mkdir(parents=True, exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    options, program = parse(list(sys.argv[1:] if argv is None else argv))
    if not program:
        _say("no program after --")
        return EXIT_BAD_INPUT
    config_text = Path(options.config).read_text()
    run_dir = str(yaml.safe_load(config_text)["run_dir"])
    try:
        write_record(config_text, run_dir)
    except Exception as exc:  # storage trouble: transient more often than not
        _say(f"could not write {run_dir}/{CONFIG_FILE}: {exc}")
        return EXIT_FAILED
    try:
        make_contract_paths(os.environ)
    except OSError as exc:
        _say(f"cannot create the job contract's directories: {exc}")
        return EXIT_FAILED
    if options.code:
        try:
            data = fetch(options.code, options.sha256)
        except CodeError as exc:
            _say(str(exc))
            return EXIT_BAD_INPUT
        into = Path(options.into)
        unpack(data, options.sha256, into)
        os.chdir(into)
    env = os.environ
    syncs = syncs_for(
        run_dir,
        env.get("TRAINSTACK_METRICS", ""),
        env.get("TRAINSTACK_CHECKPOINT_DIR", ""),
        env.get("TRAINSTACK_CHECKPOINT_URI", ""),
    )
    for mirror in (s for s in syncs if isinstance(s, CheckpointMirror)):
        try:
            restored = mirror.restore()
        except Exception as exc:  # storage trouble: transient more often than not
            _say(f"could not restore {run_dir}/checkpoints: {exc}")
            return EXIT_FAILED
        if restored:
            _say(f"restored {restored} files from {run_dir}/checkpoints into {mirror.local}")
    if syncs:
        return run_syncing(program, syncs)
    return exec_program(program, _say)


if __name__ == "__main__":
    sys.exit(main())
