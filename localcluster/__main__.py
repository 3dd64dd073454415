"""`python -m localcluster up|down|build|preview|finish|restart`: what `make cluster-up`/
`cluster-down` run."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from localcluster import build, cluster, objects, program


def _preview(state_dir: Path | None) -> dict[str, int]:
    """What `pulumi up` would change on the running cluster (nothing, right after `up`)."""
    directory = (state_dir or cluster.default_state_dir()).resolve()
    state = cluster.State.load(directory)
    if state is None:
        raise SystemExit(f"localcluster: nothing running ({directory} has no state)")
    return program.preview(state.directory, objects.local_stack(), state.kubeconfig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="default: $TRAINSTACK_CLUSTER_DIR or .cluster"
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("build", help="build every component into the cache (once per version)")
    up = verbs.add_parser("up", help="start the cluster (builds first if needed); idempotent")
    up.add_argument("--config-dir", type=Path, default=None, help="where stack/local.yaml goes")
    verbs.add_parser(
        "down", help="`pulumi destroy`, stop what `up` started, remove its state and stack file"
    )
    verbs.add_parser(
        "preview", help="`pulumi preview` of the stack on the running cluster (exit 1: changes)"
    )
    restart = verbs.add_parser(
        "restart", help="stop one component (if it runs) and start it as `up` first did"
    )
    restart.add_argument("name", help="as `up` lists it: etcd, kube-apiserver, kueue, ...")
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
    elif args.verb == "preview":
        changed = _preview(args.state_dir)
        print(f"localcluster: pulumi preview: {changed or 'no changes'}")
        return 1 if changed else 0
    elif args.verb == "restart":
        directory = (args.state_dir or cluster.default_state_dir()).resolve()
        state = cluster.State.load(directory)
        if state is None:
            raise SystemExit(f"localcluster: nothing running ({directory} has no state)")
        old = state.pids.get(args.name)
        cluster.restart(state, args.name)
        print(f"localcluster: restarted {args.name} (pid {old} -> {state.pids[args.name]})")
    else:
        ended = cluster.finish(args.state_dir, args.run_id, args.exit_code)
        print(f"localcluster: {len(ended)} pod(s) of {args.run_id} end with {args.exit_code}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
