#!/usr/bin/env bash
# The Docker tests, end to end: the partition test (crates/cli/tests/docker.rs) and the
# Compose cluster of deploy/compose (crates/cli/tests/compose.rs). Builds the static binary
# and a FROM-scratch image (docker/build-image.sh), runs the tests against it, and
# removes every container, network and image of the run — also when it fails or is
# interrupted. See docs/cluster-testing.md.
#
# Environment: CARGO, CARGO_TARGET_DIR; PROFILE (default debug); LATTICEKV_DOCKER_PARTITION_SECS
# (default 30).
set -euo pipefail
cd "$(dirname "$0")/../.."
CARGO=${CARGO:-cargo}

die() { echo "docker-test: $*" >&2; exit 1; }

command -v docker >/dev/null || die "the docker CLI is not installed; this test needs Docker Engine"
if ! err=$(docker info 2>&1 >/dev/null); then
  die "docker is not usable here ('docker info' failed: $(echo "$err" | head -n 3 | tr '\n' ' ')). \
This test needs a running Docker Engine and permission to use it."
fi

RUN="lkvtest-$$-$(date +%s)"
IMAGE="latticekv-test:$RUN"
LABEL="latticekv.test=$RUN"

cleanup() {
  local status=$?
  set +e
  local containers networks
  containers=$(docker ps -aq --filter "label=$LABEL" 2>/dev/null || true)
  if [ -n "$containers" ]; then docker rm -f -v $containers >/dev/null 2>&1 || true; fi
  networks=$(docker network ls -q --filter "label=$LABEL" 2>/dev/null || true)
  if [ -n "$networks" ]; then docker network rm $networks >/dev/null 2>&1 || true; fi
  # The Compose test's project (crates/cli/tests/compose.rs removes it itself; this is for
  # an interrupted run). `down` interpolates the file, hence the placeholder secrets.
  local compose=(docker-compose)
  docker compose version >/dev/null 2>&1 && compose=(docker compose)
  LATTICEKV_CLUSTER_SECRET=x LATTICEKV_PASSWORD=x LATTICEKV_IMAGE="$IMAGE" \
    "${compose[@]}" -p "$RUN-compose" -f deploy/compose/compose.yaml down -v --remove-orphans \
    >/dev/null 2>&1 || true
  docker image rm -f "$IMAGE" >/dev/null 2>&1 || true
  local left
  left=$( (docker ps -aq --filter "label=$LABEL"; docker network ls -q --filter "label=$LABEL"; \
          docker image ls -q --filter "label=$LABEL") 2>/dev/null)
  if [ -n "$left" ]; then echo "docker-test: could not remove: $left" >&2; fi
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
# The debug profile: the image only has to behave, and a release build of the whole binary
# takes several times longer on a small machine (the shipped image is release: make docker-image).
PROFILE=${PROFILE:-debug} IMAGE_LABEL="$LABEL" docker/build-image.sh "$IMAGE"
echo "docker-test: image ready after $(( $(date +%s) - start )) s"
LATTICEKV_DOCKER_IMAGE="$IMAGE" LATTICEKV_DOCKER_RUN="$RUN" \
  "$CARGO" test -p latticekv --test docker --test compose -- --ignored --nocapture --test-threads=1
echo "docker-test: passed in $(( $(date +%s) - start )) s"
