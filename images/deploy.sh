#!/usr/bin/env bash
# Deploy one image, by digest, to one Pulumi stack. The only place the deploy steps are written:
# the deploy workflow's dev job runs them one by one from its runner (scan, up, smoke, promote);
# for prod the workflow runs `scan`, then the in-VPC deploy project (infra/deploy/buildspec.yml)
# runs `action`, i.e. the same up, smoke, promote inside the VPC.
#   scan      ECR scan findings at or above SCAN_FAIL_SEVERITY (default HIGH) stop the deploy
#   up        `pulumi up` with trainstack:image=IMAGE_URI, carrying the stack's last good image
#             forward, then rewrite the job defaults (<user config dir>/stack/<stack>.yaml)
#   smoke     the `smoke` experiment on the stack's cluster, pinned to IMAGE_URI
#   promote   record IMAGE_URI as the stack output last_good_image (only after a passing smoke)
#   deploy    up, smoke, promote in order; a failed step stops the rest
#   rollback  point the stack's image, and so the job defaults, back at last_good_image:
#               PULUMI_STACK=<org>/trainstack/<stack> images/deploy.sh rollback
#   action    what the deploy project runs: DEPLOY_ACTION=deploy (default) or rollback, and
#             nothing else (a promote without its smoke is never started from outside)
# A failed smoke stops before promote: the stack keeps its previous last_good_image, prod is
# never reached, and `rollback` returns the job defaults to that image.
#
# Environment: PULUMI_STACK (org/project/stack), IMAGE_URI (<repo>@sha256:..., or <repo> with
# IMAGE_DIGEST=sha256:...; not for rollback), PULUMI_ACCESS_TOKEN (up, promote, rollback only),
# SMOKE_COMPUTE (a compute= choice; unset: the smoke experiment's own), DEPLOY_ACTION (action),
# PYTHON (default .venv/bin/python), TRAINSTACK (default .venv/bin/trainstack).
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

# IMAGE_URI pinned by digest; IMAGE_DIGEST (the deploy project's variable), when set, is the
# digest and must agree with any IMAGE_URI already carries.
pinned_image() {
  need IMAGE_URI
  local image=$IMAGE_URI
  if [[ -n ${IMAGE_DIGEST:-} ]]; then
    [[ $IMAGE_DIGEST =~ ^sha256:[0-9a-f]{64}$ ]] ||
      die "IMAGE_DIGEST=$IMAGE_DIGEST: expected sha256:<64 hex digits>"
    [[ $image != *@* || ${image#*@} == "$IMAGE_DIGEST" ]] ||
      die "IMAGE_URI=$IMAGE_URI and IMAGE_DIGEST=$IMAGE_DIGEST name different images"
    image="${image%@*}@$IMAGE_DIGEST"
  fi
  [[ $image =~ ^[^@]+@sha256:[0-9a-f]{64}$ ]] ||
    die "IMAGE_URI=$image is not digest-pinned (<repository>@sha256:<digest>)"
  echo "$image"
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
    ${SMOKE_COMPUTE:+"compute=$SMOKE_COMPUTE"} "stack=${PULUMI_STACK##*/}" "job.image=$image" --wait
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

cmd_deploy() {
  # Checked before the first step, so bad input changes nothing.
  need PULUMI_STACK
  pinned_image >/dev/null
  cmd_up
  cmd_smoke
  cmd_promote
}

cmd_action() {
  case ${DEPLOY_ACTION:-deploy} in
    deploy) cmd_deploy ;;
    rollback) cmd_rollback ;;
    *) die "DEPLOY_ACTION=$DEPLOY_ACTION; allowed: deploy, rollback" ;;
  esac
}

main() {
  [[ $# -eq 1 ]] || die "usage: images/deploy.sh scan|up|smoke|promote|deploy|rollback|action"
  case $1 in
    scan) cmd_scan ;;
    up) cmd_up ;;
    smoke) cmd_smoke ;;
    promote) cmd_promote ;;
    deploy) cmd_deploy ;;
    rollback) cmd_rollback ;;
    action) cmd_action ;;
    *) die "unknown step '$1'; allowed: scan, up, smoke, promote, deploy, rollback, action" ;;
  esac
}

main "$@"
