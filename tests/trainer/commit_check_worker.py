"""The trainer with shards damaged between a successful save and its commit check, for the
test that such a step is never committed: `torchrun ... -m tests.trainer.commit_check_worker
--config PATH [key=value ...]` with DAMAGE_ENV="<step>:<delete|truncate>[,...]".

Every rank's write of that step succeeds; then, as rank 0's commit check starts (its call of
`inspect_step`), rank 1's `__1_*.distcp` of the step is deleted, or cut to half its size.
The product code runs unchanged: only the check's entry is wrapped, in this process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

DAMAGE_ENV = "TRAINSTACK_TEST_DAMAGE_BEFORE_COMMIT_CHECK"


def damage(directory: Path, how: str) -> None:
    shard = sorted(directory.glob("__1_*.distcp"))[0]
    if how == "delete":
        shard.unlink()
    elif how == "truncate":
        os.truncate(shard, shard.stat().st_size // 2)
    else:
        raise ValueError(f"{DAMAGE_ENV}: {how!r}; allowed: delete, truncate")


def main() -> int:
    from contract.checkpoints import step_dir
    from trainer import __main__ as entry
    from trainer.checkpoint import checkpointer

    plan = dict(item.split(":") for item in os.environ[DAMAGE_ENV].split(","))
    check = checkpointer.inspect_step

    def damaged_first(storage, step, files=None):
        how = plan.pop(str(step), None)
        if how is not None:
            damage(storage.local_path(step_dir(step)), how)
        return check(storage, step, files)

    checkpointer.inspect_step = damaged_first
    return entry.main(sys.argv[1:])


if __name__ == "__main__":
    from trainer.__main__ import exit_now

    exit_now(main())
