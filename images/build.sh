#!/usr/bin/env bash
# The trainer image's CodeBuild steps, one subcommand per step (images/buildspec.yml runs them in
# order): login, build, selftest, push. Kept out of the buildspec so shellcheck sees real shell.
#
# Tags: the full git SHA always (what `jobs` derives from job.image_repository), plus the
# version of a semver git tag (v1.2.3 -> 1.2.3). Tags are immutable and never overwritten: a
# SHA already in ECR is not rebuilt (a retried or duplicate build), and a version tag that
# exists must already point at this commit's image, or the build fails. A version tag for an
# image that exists is added by re-putting that image's manifest, so both tags share one digest.
# Pull-request builds build and self-test but never push.
#
# Environment: REPOSITORY_URI and AWS_REGION (set on the CodeBuild project),
# CODEBUILD_RESOLVED_SOURCE_VERSION (the commit), optionally GIT_TAG or CODEBUILD_WEBHOOK_TRIGGER
# (tag/NAME), CODEBUILD_WEBHOOK_EVENT, CODEBUILD_SOURCE_REPO_URL, BUILD_CACHE_REF.
# Output: image.json (the artifact) and image.env (IMAGE_URI, IMAGE_DIGEST for exported-variables).
set -euo pipefail

readonly DOCKERFILE=images/trainer/Dockerfile
readonly STATE_DIR=${BUILD_STATE_DIR:-.image-build}
readonly SEMVER_RE='^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$'

die() {
  echo "build.sh: $*" >&2
  exit 1
}

need() {
  local name
  for name in "$@"; do
    [[ -n "${!name:-}" ]] || die "$name is not set (it comes from the CodeBuild project/build)"
  done
}

git_sha() {
  need CODEBUILD_RESOLVED_SOURCE_VERSION
  local sha=$CODEBUILD_RESOLVED_SOURCE_VERSION
  [[ $sha =~ ^[0-9a-f]{40}$ ]] || die "CODEBUILD_RESOLVED_SOURCE_VERSION=$sha is not a full git SHA"
  echo "$sha"
}

repository_name() {
  need REPOSITORY_URI
  echo "${REPOSITORY_URI#*/}"
}

# The image version from a semver git tag, or nothing when this build is not for a tag.
version_tag() {
  local tag=${GIT_TAG:-}
  if [[ -z $tag && ${CODEBUILD_WEBHOOK_TRIGGER:-} == tag/* ]]; then
    tag=${CODEBUILD_WEBHOOK_TRIGGER#tag/}
  fi
  [[ -n $tag ]] || return 0
  [[ $tag =~ $SEMVER_RE ]] || die "git tag $tag is not semver (vMAJOR.MINOR.PATCH[-pre])"
  echo "${tag#v}"
}

is_pull_request() {
  [[ ${CODEBUILD_WEBHOOK_EVENT:-} == PULL_REQUEST_* ]]
}

# The digest ECR holds for a tag, or nothing when the tag does not exist. Any other error
# (permissions, throttling past the CLI's retries) stops the build: guessing "absent" could
# lead to pushing over a tag.
remote_digest() {
  local out
  if out=$(aws ecr describe-images --region "$AWS_REGION" --repository-name "$(repository_name)" \
    --image-ids "imageTag=$1" --query 'imageDetails[0].imageDigest' --output text 2>&1); then
    echo "$out"
  elif [[ $out != *ImageNotFoundException* ]]; then
    die "aws ecr describe-images for tag $1 failed: $out"
  fi
}

cmd_login() {
  need REPOSITORY_URI AWS_REGION
  aws ecr get-login-password --region "$AWS_REGION" |
    docker login --username AWS --password-stdin "${REPOSITORY_URI%%/*}"
}

cmd_build() {
  need REPOSITORY_URI AWS_REGION
  local sha existing version
  sha=$(git_sha)
  version=$(version_tag) # fails early on a malformed tag, before an hour of building
  mkdir -p "$STATE_DIR"
  existing=$(remote_digest "$sha")
  if [[ $existing == sha256:* ]]; then
    echo "image $REPOSITORY_URI:$sha already in ECR ($existing): not rebuilding"
    echo "$existing" >"$STATE_DIR/reused-digest"
    return 0
  fi
  rm -f "$STATE_DIR/reused-digest"
  local cache=${BUILD_CACHE_REF:-$REPOSITORY_URI:buildcache}
  docker buildx inspect trainstack >/dev/null 2>&1 ||
    docker buildx create --name trainstack --driver docker-container >/dev/null
  # --load: the self-test runs this exact image before anything is pushed. A failed cache
  # export (a registry hiccup) must not fail the build, hence ignore-error.
  docker buildx build --builder trainstack --file "$DOCKERFILE" --load \
    --tag "$REPOSITORY_URI:$sha" \
    --build-arg "GIT_SHA=$sha" \
    --build-arg "SOURCE_URL=${CODEBUILD_SOURCE_REPO_URL:-unknown}" \
    --build-arg "IMAGE_VERSION=${version:-$sha}" \
    --cache-from "type=registry,ref=$cache" \
    --cache-to "type=registry,ref=$cache,mode=max,image-manifest=true,oci-mediatypes=true,ignore-error=true" \
    .
}

cmd_selftest() {
  need REPOSITORY_URI
  local sha
  sha=$(git_sha)
  if [[ -f "$STATE_DIR/reused-digest" ]]; then
    echo "image $sha was self-tested when it was pushed: skipping"
    return 0
  fi
  docker run --rm "$REPOSITORY_URI:$sha" python -m trainer.smoke
}

write_outputs() {
  local sha=$1 digest=$2 pushed=$3 version=$4
  local image=""
  [[ -n $digest ]] && image="$REPOSITORY_URI@$digest"
  cat >image.json <<EOF
{"repository": "$REPOSITORY_URI", "git_sha": "$sha", "version": "$version", "digest": "$digest", "image": "$image", "pushed": $pushed}
EOF
  printf 'IMAGE_URI=%s\nIMAGE_DIGEST=%s\n' "$image" "$digest" >image.env
  echo "image: ${image:-not pushed}"
}

add_version_tag() {
  local sha=$1 digest=$2 version=$3 existing manifest media_type
  existing=$(remote_digest "$version")
  if [[ $existing == sha256:* ]]; then
    [[ $existing == "$digest" ]] ||
      die "tag $version already exists in ECR with digest $existing, not this commit's $digest: refusing to overwrite an immutable tag"
    echo "tag $version already points at $digest"
    return 0
  fi
  manifest=$(aws ecr batch-get-image --region "$AWS_REGION" --repository-name "$(repository_name)" \
    --image-ids "imageDigest=$digest" --query 'images[0].imageManifest' --output text)
  media_type=$(aws ecr batch-get-image --region "$AWS_REGION" --repository-name "$(repository_name)" \
    --image-ids "imageDigest=$digest" --query 'images[0].imageManifestMediaType' --output text)
  aws ecr put-image --region "$AWS_REGION" --repository-name "$(repository_name)" \
    --image-tag "$version" --image-manifest "$manifest" \
    --image-manifest-media-type "$media_type" >/dev/null
  echo "tagged $digest as $version"
}

cmd_push() {
  need REPOSITORY_URI AWS_REGION
  local sha version digest existing
  sha=$(git_sha)
  version=$(version_tag)
  if is_pull_request; then
    echo "pull-request build (${CODEBUILD_WEBHOOK_EVENT}): built and self-tested, not pushed"
    write_outputs "$sha" "" false "$version"
    return 0
  fi
  if [[ -f "$STATE_DIR/reused-digest" ]]; then
    digest=$(<"$STATE_DIR/reused-digest")
  else
    existing=$(remote_digest "$sha")
    if [[ $existing == sha256:* ]]; then
      # Another build of the same commit (a webhook and a workflow both started one) pushed
      # first: its image is this commit's, already self-tested. Adopt it, never overwrite it.
      echo "tag $sha appeared in ECR during this build ($existing): using that image"
      digest=$existing
    else
      docker push "$REPOSITORY_URI:$sha"
      digest=$(remote_digest "$sha")
      [[ $digest == sha256:* ]] || die "pushed $REPOSITORY_URI:$sha but ECR has no digest for it"
    fi
  fi
  [[ -z $version ]] || add_version_tag "$sha" "$digest" "$version"
  write_outputs "$sha" "$digest" true "$version"
}

main() {
  [[ $# -eq 1 ]] || die "usage: images/build.sh login|build|selftest|push"
  case $1 in
    login) cmd_login ;;
    build) cmd_build ;;
    selftest) cmd_selftest ;;
    push) cmd_push ;;
    *) die "unknown step '$1'; allowed: login, build, selftest, push" ;;
  esac
}

main "$@"
