#!/usr/bin/env bash
# Deploy one image, by digest, to one Pulumi stack; one subcommand per step, run in order by the
# deploy workflow for dev and by the in-VPC deploy project for prod:
#   scan      ECR scan findings at or above SCAN_FAIL_SEVERITY (default HIGH) stop the deploy
#   up        `pulumi up` with trainstack:image=IMAGE_URI, carrying the stack's last good image
#             forward, then rewrite the job defaults (conf/stack/<stack>.yaml) from the outputs
#   smoke     the `smoke` experiment on the stack's cluster, pinned to IMAGE_URI
#   promote   record IMAGE_URI as the stack output last_good_image (only after a passing smoke)
#   rollback  point the stack's image, and so the job defaults, back at last_good_image:
#               PULUMI_STACK=<org>/trainstack/<stack> images/deploy.sh rollback
# A failed smoke stops before promote: the stack keeps its previous last_good_image, prod is
# never reached, and `rollback` returns the job defaults to that image.
#
# Environment: PULUMI_STACK (org/project/stack), IMAGE_URI (<repo>@sha256:..., not for
# rollback), PULUMI_ACCESS_TOKEN (up, promote, rollback only), SMOKE_COMPUTE, PYTHON
# (default .venv/bin/python), TRAINSTACK (default .venv/bin/trainstack).
set -euo pipefail

readonly PYTHON=${PYTHON:-.venv/bin/python}
readonly TRAINSTACK=${TRAINSTACK:-.venv/bin/trainstack}

die() {
  echo "deploy.sh: $*" >&2
  exit 2
}

need() {
  local name
  for name in "$@"; do
    [[ -n "${!name:-}" ]] || die "$name is not set"
  done
}

pinned_image() {
  need IMAGE_URI
  [[ $IMAGE_URI =~ ^[^@]+@sha256:[0-9a-f]{64}$ ]] ||
    die "IMAGE_URI=$IMAGE_URI is not digest-pinned (<repository>@sha256:<digest>)"
  echo "$IMAGE_URI"
}

# The stack's last good image, or nothing before the first promote.
last_good() {
  pulumi stack output last_good_image --stack "$PULUMI_STACK" 2>/dev/null | grep -v '^null$' || true
}

# pulumi up with the stack's image and last good image set; both become stack outputs.
up_with() {
  local image=$1 good=$2
  local config=(--config "trainstack:image=$image")
  [[ -z $good ]] || config+=(--config "trainstack:lastGoodImage=$good")
  pulumi up --yes --skip-preview --diff --stack "$PULUMI_STACK" "${config[@]}"
}

write_job_defaults() {
  pulumi stack output --json --show-secrets --stack "$PULUMI_STACK" |
    "$PYTHON" -m infra.stack_defaults --stack "${PULUMI_STACK##*/}" --outputs -
}

cmd_scan() {
  "$PYTHON" images/scan_gate.py --image "$(pinned_image)"
}

cmd_up() {
  need PULUMI_STACK
  local image
  image=$(pinned_image)
  up_with "$image" "$(last_good)"
  write_job_defaults
}

cmd_smoke() {
  need PULUMI_STACK
  local image
  image=$(pinned_image)
  "$TRAINSTACK" launch experiment=smoke backend=kubernetes \
    "compute=${SMOKE_COMPUTE:-g5.12xlarge}" "stack=${PULUMI_STACK##*/}" "job.image=$image" --wait
}

cmd_promote() {
  need PULUMI_STACK
  local image
  image=$(pinned_image)
  up_with "$image" "$image"
  echo "last good image of $PULUMI_STACK: $image"
}

cmd_rollback() {
  need PULUMI_STACK
  local good
  good=$(last_good)
  [[ -n $good ]] || die "$PULUMI_STACK has no last_good_image output yet: nothing to roll back to"
  up_with "$good" "$good"
  write_job_defaults
  echo "rolled $PULUMI_STACK back to $good"
}

main() {
  [[ $# -eq 1 ]] || die "usage: images/deploy.sh scan|up|smoke|promote|rollback"
  case $1 in
    scan) cmd_scan ;;
    up) cmd_up ;;
    smoke) cmd_smoke ;;
    promote) cmd_promote ;;
    rollback) cmd_rollback ;;
    *) die "unknown step '$1'; allowed: scan, up, smoke, promote, rollback" ;;
  esac
}

main "$@"
