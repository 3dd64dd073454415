"""`python -m localcluster up|down|build|finish`: what `make cluster-up`/`cluster-down` run."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from localcluster import build, cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="default: $TRAINSTACK_CLUSTER_DIR or .cluster"
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("build", help="build every component into the cache (once per version)")
    up = verbs.add_parser("up", help="start the cluster (builds first if needed); idempotent")
    up.add_argument("--config-dir", type=Path, default=None, help="where stack/local.yaml goes")
    verbs.add_parser("down", help="stop what `up` started, remove its state and stack file")
    finish = verbs.add_parser("finish", help="end a run's running pods with an exit code")
    finish.add_argument("run_id")
    finish.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.verb == "build":
        build.build_all()
    elif args.verb == "up":
        cluster.up(args.state_dir, args.config_dir and args.config_dir / "stack")
        print(f"localcluster: cluster-up took {time.monotonic() - started:.0f}s")
    elif args.verb == "down":
        cluster.down(args.state_dir)
    else:
        ended = cluster.finish(args.state_dir, args.run_id, args.exit_code)
        print(f"localcluster: {len(ended)} pod(s) of {args.run_id} end with {args.exit_code}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
