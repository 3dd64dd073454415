#!/usr/bin/env bash
# The trainer image's CodeBuild steps, one subcommand per step (images/buildspec.yml runs them in
# order): login, build, selftest, push. Kept out of the buildspec so shellcheck sees real shell.
#
# BUILD_KIND comes from the CodeBuild project (infra/ci.py), never from the source:
#   release       main and vX.Y.Z tags: tag = the full git SHA (plus X.Y.Z for a semver git
#                 tag); reads and then rewrites the layer cache in its own repository.
#   nightly       main rebuilt from scratch (--pull, no cache) so base-image and apt fixes
#                 arrive; tag = nightly-YYYYMMDD-<sha>, which no release tag can collide with
#                 and no deploy picks unless asked. Writes no cache.
#   pull-request  build and self-test only, reading the cache; never pushes. Its project's
#                 role cannot push anyway: this script is in the pull request's hands.
# Tags are immutable (the repository is IMMUTABLE): a tag already in ECR is reused, never
# rebuilt, and a version tag that exists must already point at this commit's image.
# The image is built once with --load and self-tested; the push rebuilds it from the builder's
# cache with an SBOM and max-mode provenance attached (BuildKit attestations cannot travel
# through --load) and fails unless the pushed image's config digest equals the tested one's
# (SOURCE_DATE_EPOCH, the commit time, keeps both builds byte-identical).
#
# Environment: REPOSITORY_URI, BUILD_CACHE_REPOSITORY_URI, AWS_REGION, BUILD_KIND (the project),
# CODEBUILD_RESOLVED_SOURCE_VERSION (the commit), optionally GIT_TAG or CODEBUILD_WEBHOOK_TRIGGER
# (tag/NAME), CODEBUILD_WEBHOOK_EVENT, CODEBUILD_SOURCE_REPO_URL, SOURCE_DATE_EPOCH, BUILD_DATE.
# Output: image.json (the artifact) and image.env (IMAGE_URI, IMAGE_DIGEST for exported-variables).
set -euo pipefail

# IMAGE_KIND: trainer (default), trainer-hf (runner=hf's variant: images/trainer-hf, built on
# the trainer image this build just pushed, named by its digest from image.json) or api (images/api: the Training API, no torch). The others go to the
# same repository under their own tags (hf-<sha>, api-<sha>, api-nightly-..., api-X.Y.Z) and
# write <prefix>image.json / <prefix>image.env, so one build runs all without any clobbering
# another's outputs.
readonly IMAGE_KIND=${IMAGE_KIND:-trainer}
case $IMAGE_KIND in
  trainer) readonly TAG_PREFIX="" OUTPUT_PREFIX="" ;;
  trainer-hf) readonly TAG_PREFIX="hf-" OUTPUT_PREFIX="hf-" ;;
  api) readonly TAG_PREFIX="api-" OUTPUT_PREFIX="api-" ;;
  *)
    echo "build.sh: IMAGE_KIND=$IMAGE_KIND; allowed: trainer, trainer-hf, api" >&2
    exit 1
    ;;
esac
readonly DOCKERFILE=images/$IMAGE_KIND/Dockerfile
readonly STATE_DIR=${BUILD_STATE_DIR:-.image-build}
readonly SEMVER_RE='^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$'
readonly BUILD_CACHE_TAG=buildcache # infra/registry.py BUILD_CACHE_TAG

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

# release, nightly or pull-request; a webhook pull-request event is a pull-request build
# whatever the project says.
build_kind() {
  if [[ ${CODEBUILD_WEBHOOK_EVENT:-} == PULL_REQUEST_* ]]; then
    echo pull-request
    return 0
  fi
  need BUILD_KIND
  case $BUILD_KIND in
    release | nightly | pull-request) echo "$BUILD_KIND" ;;
    *) die "BUILD_KIND=$BUILD_KIND; allowed: release, nightly, pull-request" ;;
  esac
}

repository_name() {
  need REPOSITORY_URI
  echo "${REPOSITORY_URI#*/}"
}

# The version from a semver git tag, or nothing when this is not a release build for a tag.
version_tag() {
  local kind
  kind=$(build_kind)
  [[ $kind == release ]] || return 0
  local tag=${GIT_TAG:-}
  if [[ -z $tag && ${CODEBUILD_WEBHOOK_TRIGGER:-} == tag/* ]]; then
    tag=${CODEBUILD_WEBHOOK_TRIGGER#tag/}
  fi
  [[ -n $tag ]] || return 0
  [[ $tag =~ $SEMVER_RE ]] || die "git tag $tag is not semver (vMAJOR.MINOR.PATCH[-pre])"
  echo "$TAG_PREFIX${tag#v}"
}

# The tag this build pushes: the git SHA, or nightly-YYYYMMDD-<sha> for a nightly rebuild.
image_tag() {
  local sha kind
  sha=$(git_sha)
  kind=$(build_kind)
  if [[ $kind == nightly ]]; then
    local day=${BUILD_DATE:-$(date -u +%Y%m%d)}
    [[ $day =~ ^[0-9]{8}$ ]] || die "BUILD_DATE=$day is not YYYYMMDD"
    echo "${TAG_PREFIX}nightly-$day-$sha"
  else
    echo "$TAG_PREFIX$sha"
  fi
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

source_date_epoch() {
  if [[ -n ${SOURCE_DATE_EPOCH:-} ]]; then
    echo "$SOURCE_DATE_EPOCH"
  else
    git log -1 --format=%ct
  fi
}

# The trainer image the hf variant builds on: the one this build pushed (image.json's "image":
# REPOSITORY@sha256:...), else (pull-request: nothing pushed) the one it loaded, by its tag.
trainer_image() {
  local image tag
  image=$(sed -n 's/.*"image": "\([^"]*\)".*/\1/p' image.json 2>/dev/null)
  if [[ $image != *@sha256:* ]]; then
    tag=$(image_tag)
    image="$REPOSITORY_URI:${tag#"$TAG_PREFIX"}"
  fi
  echo "$image"
}

# Build flags shared by the self-test build and the push build, so both produce one image.
build_args() {
  local sha=$1 version=$2 kind=$3 tag epoch
  tag=$(image_tag)
  epoch=$(source_date_epoch)
  printf '%s\n' --builder trainstack --file "$DOCKERFILE" \
    --tag "$REPOSITORY_URI:$tag" \
    --build-arg "GIT_SHA=$sha" \
    --build-arg "SOURCE_URL=${CODEBUILD_SOURCE_REPO_URL:-unknown}" \
    --build-arg "IMAGE_VERSION=${version:-$tag}" \
    --build-arg "SOURCE_DATE_EPOCH=$epoch"
  if [[ $IMAGE_KIND == trainer-hf ]]; then
    printf '%s\n' --build-arg "TRAINER_IMAGE=$(trainer_image)"
  fi
  if [[ $kind == nightly ]]; then
    printf '%s\n' --pull --no-cache
  else
    printf '%s\n' --cache-from "type=registry,ref=$BUILD_CACHE_REPOSITORY_URI:$BUILD_CACHE_TAG"
  fi
}

cmd_login() {
  need REPOSITORY_URI BUILD_CACHE_REPOSITORY_URI AWS_REGION
  local registry
  for registry in "${REPOSITORY_URI%%/*}" "${BUILD_CACHE_REPOSITORY_URI%%/*}"; do
    aws ecr get-login-password --region "$AWS_REGION" |
      docker login --username AWS --password-stdin "$registry"
  done
}

cmd_build() {
  need REPOSITORY_URI BUILD_CACHE_REPOSITORY_URI AWS_REGION
  local sha existing version kind tag args
  sha=$(git_sha)
  kind=$(build_kind)
  version=$(version_tag) # fails early on a malformed tag, before an hour of building
  tag=$(image_tag)
  mkdir -p "$STATE_DIR"
  rm -f "$STATE_DIR/reused-digest"
  if [[ $kind != pull-request ]]; then
    existing=$(remote_digest "$tag")
    if [[ $existing == sha256:* ]]; then
      echo "image $REPOSITORY_URI:$tag already in ECR ($existing): not rebuilding"
      echo "$existing" >"$STATE_DIR/reused-digest"
      return 0
    fi
  fi
  docker buildx inspect trainstack >/dev/null 2>&1 ||
    docker buildx create --name trainstack --driver docker-container >/dev/null
  mapfile -t args < <(build_args "$sha" "$version" "$kind")
  # --load: the self-test runs this exact image before anything is pushed. Its config digest
  # (from BuildKit, whatever image store the engine uses) is what the push must reproduce.
  docker buildx build "${args[@]}" --load --metadata-file "$STATE_DIR/loaded.json" .
}

cmd_selftest() {
  need REPOSITORY_URI
  local tag
  tag=$(image_tag)
  if [[ -f "$STATE_DIR/reused-digest" ]]; then
    echo "image $tag was self-tested when it was pushed: skipping"
    return 0
  fi
  if [[ $IMAGE_KIND == api ]]; then
    # The service's modules import, and torch is nowhere in the image.
    docker run --rm --entrypoint python "$REPOSITORY_URI:$tag" -c \
      "import importlib.util, jobs.api.app, jobs.plot.png; assert not importlib.util.find_spec('torch')"
  elif [[ $IMAGE_KIND == trainer-hf ]]; then
    docker run --rm "$REPOSITORY_URI:$tag" python -m trainer.smoke
    docker run --rm "$REPOSITORY_URI:$tag" python -c "import accelerate, peft, transformers"
  else
    docker run --rm "$REPOSITORY_URI:$tag" python -m trainer.smoke
  fi
}

write_outputs() {
  local sha=$1 digest=$2 pushed=$3 version=$4 kind=$5 tag=$6
  local image=""
  [[ -n $digest ]] && image="$REPOSITORY_URI@$digest"
  cat >"${OUTPUT_PREFIX}image.json" <<EOF
{"repository": "$REPOSITORY_URI", "git_sha": "$sha", "kind": "$kind", "tag": "$tag", "version": "$version", "digest": "$digest", "image": "$image", "pushed": $pushed}
EOF
  local variable=${OUTPUT_PREFIX^^}
  variable=${variable//-/_}
  printf '%sIMAGE_URI=%s\n%sIMAGE_DIGEST=%s\n' "$variable" "$image" "$variable" "$digest" \
    >"${OUTPUT_PREFIX}image.env"
  echo "image: ${image:-not pushed}"
}

add_version_tag() {
  local digest=$1 version=$2 existing manifest media_type
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

# One value from buildx's --metadata-file (a flat JSON object).
metadata_value() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$@"
}

# Rebuild from the builder's cache and push with attestations; the pushed image must be the one
# the self-test ran. Prints the pushed digest (the image index, attestations included).
push_with_attestations() {
  local sha=$1 version=$2 kind=$3 tested pushed_config args
  local metadata=$STATE_DIR/metadata.json
  tested=$(metadata_value "$STATE_DIR/loaded.json" containerimage.config.digest)
  [[ $tested == sha256:* ]] || die "no config digest of the self-tested image in $STATE_DIR/loaded.json"
  mapfile -t args < <(build_args "$sha" "$version" "$kind")
  if [[ $kind == release ]]; then
    # Only main and tag builds write the cache, in its own repository; a failed cache export
    # (a registry hiccup) must not fail a release, hence ignore-error.
    args+=(--cache-to "type=registry,ref=$BUILD_CACHE_REPOSITORY_URI:$BUILD_CACHE_TAG,mode=max,image-manifest=true,oci-mediatypes=true,ignore-error=true")
  fi
  docker buildx build "${args[@]}" --sbom=true --provenance=mode=max --push \
    --metadata-file "$metadata" . >&2
  pushed_config=$(metadata_value "$metadata" containerimage.config.digest)
  [[ $pushed_config == "$tested" ]] ||
    die "the pushed image's config $pushed_config is not the self-tested image's $tested"
  metadata_value "$metadata" containerimage.digest
}

cmd_push() {
  need REPOSITORY_URI BUILD_CACHE_REPOSITORY_URI AWS_REGION
  local sha version digest existing kind tag
  sha=$(git_sha)
  kind=$(build_kind)
  version=$(version_tag)
  tag=$(image_tag)
  if [[ $kind == pull-request ]]; then
    echo "pull-request build: built and self-tested, not pushed"
    write_outputs "$sha" "" false "$version" "$kind" "$tag"
    return 0
  fi
  if [[ -f "$STATE_DIR/reused-digest" ]]; then
    digest=$(<"$STATE_DIR/reused-digest")
  else
    existing=$(remote_digest "$tag")
    if [[ $existing == sha256:* ]]; then
      # Another build of the same commit pushed first: its image is this commit's, already
      # self-tested. Adopt it, never overwrite it.
      echo "tag $tag appeared in ECR during this build ($existing): using that image"
      digest=$existing
    else
      digest=$(push_with_attestations "$sha" "$version" "$kind")
      [[ $digest == sha256:* ]] || die "pushed $REPOSITORY_URI:$tag but got no digest"
    fi
  fi
  [[ -z $version ]] || add_version_tag "$digest" "$version"
  write_outputs "$sha" "$digest" true "$version" "$kind" "$tag"
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
