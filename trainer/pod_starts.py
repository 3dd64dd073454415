"""`python -m trainer.pod_starts --max-restarts=N -- PROGRAM`: a PyTorchJob pod's first step.
It counts this replica's starts in `<run_dir>/pod-starts/<pod name>` and replaces itself with
PROGRAM, or, past N restarts (start N+2 and later), exits 2 with one line saying why.

Why the pod counts: under `restartPolicy: ExitCode` the Training Operator (v1.9.4) gives its
pods `restartPolicy: Never` (kubeflow/training-operator pkg/core/pod.go, SetRestartPolicy),
deletes a pod that exited 128-255 and creates it again under the same name
(pkg/controller.v1/common/pod.go, ReconcilePods and createNewPod: GenGeneralName), and
`runPolicy.backoffLimit` counts only the container restartCounts of Running pods
(pkg/core/job.go, PastBackoffLimit): always 0 there, so nothing bounds the recreations. Exit 2
is one the policy never retries, so the job fails. `restartPolicy: OnFailure` would be counted,
but the kubelet would then restart a container that exited 2 (bad input) as well.

The key is the pod's name (TRAINSTACK_POD_NAME, from the downward API): `<job>-master-0`,
`<job>-worker-<i>`, the same for every pod the operator makes for that replica, and unlike
PET_NODE_RANK/RANK also set in elastic jobs (no master) and not reordered by c10d. The count is
per submission: the file holds `<count> <submission>`, and a start whose TRAINSTACK_SUBMISSION
differs from the recorded one counts from 0 again. The submission is the job's `created-at`
annotation (jobs.backends.kubernetes.submitting.stamped writes it at each submit, the
follower's resubmissions included, on the job and on its pod templates; the operator copies a
template's annotations onto every pod it makes: kubeflow/training-operator v1.9.4
pkg/controller.v1/common/pod.go, createNewPod, and pkg/controller.v1/control/pod_control.go,
GetPodFromTemplate). The job's uid would do too, but a pod sees it only in its ownerReferences,
which the downward API does not expose. A Kueue preemption's resume keeps its job, so it counts
on; a relaunch or a resubmission of the same run id starts again from 0. Two submissions of one
run in the same second would share a count (a resubmission follows a failure: seconds later).
A job applied without the stamp has an empty submission: its starts count across submissions.
The file is the user's code's to write as well (the run dir is theirs): more than MAX_BYTES,
or anything but a count and a submission, is refused in one line.

Never imports jobs/: the trainer image carries trainer/ alone.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping

from contract.config import EXIT_BAD_INPUT
from contract.run_dir import POD_NAME_ENV, POD_STARTS_DIR, SUBMISSION_ENV
from trainer.exec_program import exec_program
from trainer.storage import RunStorage, StorageError, StorageNotFoundError, open_run_storage

MAX_BYTES = 100
"""A start count's file: a decimal count, a space, the submission and a newline (under 100)."""
POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
"""A Kubernetes object name (DNS-1123 subdomain): safe as one path segment."""
SUBMISSION = re.compile(r"[0-9A-Za-z:._+-]{0,64}")
"""A submission's identity: `created-at` is `2026-11-27T17:21:24Z`; empty when unstamped."""


class StartsError(Exception):
    """The count cannot be kept: a one-line reason (the pod exits 2)."""


def _say(message: str) -> None:
    print(f"[trainer.pod_starts] {message}", file=sys.stderr, flush=True)


def starts_file(pod_name: str) -> str:
    if not POD_NAME.fullmatch(pod_name) or ".." in pod_name:
        raise StartsError(
            f"{POD_NAME_ENV}={pod_name[:80]!r} is not a pod name; allowed: a Kubernetes "
            "object name (lower-case letters, digits, '-' and '.')"
        )
    return f"{POD_STARTS_DIR}/{pod_name}"


def submission_of(environ: Mapping[str, str]) -> str:
    submission = environ.get(SUBMISSION_ENV, "")
    if not SUBMISSION.fullmatch(submission):
        raise StartsError(
            f"{SUBMISSION_ENV}={submission[:80]!r} is not a submission; allowed: up to 64 "
            "letters, digits and ':._+-' (the job's created-at annotation)"
        )
    return submission


def _refused(storage: RunStorage, rel: str, what: str) -> StartsError:
    return StartsError(
        f"{storage.uri(rel)} {what}; allowed: the '<count> <submission>' trainer.pod_starts "
        "writes (delete the file to count again)"
    )


def previous_starts(storage: RunStorage, rel: str, submission: str) -> int:
    """The count so far in `submission`: 0 when there is no file or it records another
    submission; a file over MAX_BYTES or not a count (and a submission) is refused (read at
    most MAX_BYTES + 1 bytes of it)."""
    try:
        read = storage.read_range(rel, 0, end=MAX_BYTES + 1)
    except StorageNotFoundError:
        return 0
    raw = read.data or b""
    if len(raw) > MAX_BYTES or (read.size or 0) > MAX_BYTES:
        raise _refused(storage, rel, f"is over {MAX_BYTES} bytes")
    text = raw.decode("ascii", errors="replace")
    fields = text.split()
    count, recorded = [*fields, ""][:2] if 0 < len(fields) <= 2 else ("", "")
    if not (count.isascii() and count.isdigit() and SUBMISSION.fullmatch(recorded)):
        raise _refused(storage, rel, f"holds {text.strip()[:MAX_BYTES]!r}")
    return int(count) if recorded == submission else 0


def count_start(storage: RunStorage, pod_name: str, submission: str) -> int:
    """Add this start to the pod's count in `submission` and return it (1 for a replica's
    first pod of a submission). One pod of a replica runs at a time (the operator recreates it
    under the same name, and a new submission's pods come once the old job is deleted with
    its pods), so the read and the write never race with another writer of the file."""
    rel = starts_file(pod_name)
    starts = previous_starts(storage, rel, submission) + 1
    storage.write_text(rel, f"{starts} {submission}\n" if submission else f"{starts}\n")
    return starts


def check(environ: Mapping[str, str], max_restarts: int) -> int | None:
    """None: start the program; otherwise the exit code (said in one line). Storage that does
    not answer is bookkeeping lost, never the reason a run stops: the program starts."""
    pod_name = environ.get(POD_NAME_ENV, "")
    try:
        submission = submission_of(environ)
        storage = open_run_storage(environ.get("TRAINSTACK_RUN_DIR", ""))
        starts = count_start(storage, pod_name, submission)
    except StartsError as exc:
        _say(str(exc))
        return EXIT_BAD_INPUT
    except StorageError as exc:
        _say(f"start not counted: {exc}")
        return None
    if starts > max_restarts + 1:
        _say(
            f"pod {pod_name} started {starts} times, over job.max_restarts={max_restarts} "
            f"restarts, in submission {submission or '(unstamped)'}: not starting it again "
            "(a new submission of the run counts from 0: `trainstack relaunch`, or a launch "
            "of the same run_id)"
        )
        return EXIT_BAD_INPUT
    _say(f"pod {pod_name}: start {starts} of at most {max_restarts + 1}")
    return None


def parse(argv: list[str]) -> tuple[int, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: python -m trainer.pod_starts --max-restarts=N -- PROGRAM")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m trainer.pod_starts")
    parser.add_argument("--max-restarts", type=int, required=True)
    options = parser.parse_args(argv[:split])
    if options.max_restarts < 0:
        parser.error("--max-restarts must be 0 or more")
    return options.max_restarts, argv[split + 1 :]


def main(argv: list[str] | None = None) -> int:
    max_restarts, program = parse(list(sys.argv[1:] if argv is None else argv))
    if not program:
        _say("no program after --")
        return EXIT_BAD_INPUT
    code = check(os.environ, max_restarts)
    if code is not None:
        return code
    return exec_program(program, _say)


if __name__ == "__main__":
    sys.exit(main())
