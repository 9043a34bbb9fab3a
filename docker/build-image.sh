#!/usr/bin/env bash
# Builds latticekv as a statically linked binary and a `FROM scratch` Docker image of it.
# Nothing is pulled from a registry: the build context holds only the binary and
# docker/Dockerfile.
#
#   docker/build-image.sh [TAG]             (default tag: latticekv:dev)
#
# Environment:
#   PROFILE=release|debug   cargo profile (default release: the image to ship; the tests
#                           pass PROFILE=debug, much faster to build on a small machine)
#   TARGET                  Rust target triple (default x86_64-unknown-linux-gnu; for arm64
#                           hosts: aarch64-unknown-linux-gnu, see docs/operations.md)
#   CARGO, CARGO_TARGET_DIR as for cargo; IMAGE_LABEL=key=value adds a label to the image.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${1:-latticekv:dev}
PROFILE=${PROFILE:-release}
CARGO=${CARGO:-cargo}
TARGET=${TARGET:-x86_64-unknown-linux-gnu}
TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

die() { echo "build-image: $*" >&2; exit 1; }

if ! err=$(docker info 2>&1 >/dev/null); then
  die "docker is not usable here ('docker info' failed: $(echo "$err" | head -n 3 | tr '\n' ' '))"
fi

case "$PROFILE" in
  debug) profile_flag=() ;;
  release) profile_flag=(--release) ;;
  *) die "PROFILE must be debug or release, not '$PROFILE'" ;;
esac

# +crt-static: glibc, libgcc and mimalloc (built from source by libmimalloc-sys) all linked in.
# With --target, RUSTFLAGS applies to the binary only, not to build scripts and proc macros.
echo "build-image: building the static binary ($PROFILE, $TARGET)"
RUSTFLAGS="-C target-feature=+crt-static -C strip=debuginfo" \
  "$CARGO" build --target "$TARGET" "${profile_flag[@]}" -p latticekv --bin latticekv
BIN="$TARGET_DIR/$TARGET/$PROFILE/latticekv"
[ -x "$BIN" ] || die "no binary at $BIN"

# It must really be static: a scratch image has no dynamic loader and no libraries.
if command -v file >/dev/null; then
  desc=$(file -b "$BIN")
  case "$desc" in
    *"statically linked"* | *"static-pie linked"*) ;;
    *) die "$BIN is not statically linked: $desc" ;;
  esac
fi
if ldd_out=$(ldd "$BIN" 2>&1); then
  case "$ldd_out" in
    *"statically linked"* | *"not a dynamic executable"*) ;;
    *) die "$BIN has dynamic dependencies: $ldd_out" ;;
  esac
fi
# mimalloc is the global allocator: check it is in the binary, not expected from a library.
if command -v nm >/dev/null; then
  nm "$BIN" | grep ' T mi_malloc_aligned$' >/dev/null || die "mimalloc (mi_malloc_aligned) is not linked into $BIN"
fi

# The image's platform is the binary's, not the build host's.
case "$TARGET" in
  x86_64-*) platform=linux/amd64 ;;
  aarch64-*) platform=linux/arm64 ;;
  *) die "no Docker platform known for TARGET=$TARGET" ;;
esac

CONTEXT=$(mktemp -d)
trap 'rm -rf "$CONTEXT"' EXIT
cp docker/Dockerfile "$CONTEXT/Dockerfile"
cp "$BIN" "$CONTEXT/latticekv"
# The data volume's mount point, copied in with its owner (uid 65532) by the Dockerfile.
mkdir "$CONTEXT/data"
label_args=()
[ -n "${IMAGE_LABEL:-}" ] && label_args=(--label "$IMAGE_LABEL")
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
echo "build-image: building image $TAG (FROM scratch, context: the binary only)"
# The legacy builder warns that it is deprecated when buildx is missing; it still works.
docker build --quiet "${label_args[@]}" --build-arg "VERSION=$version" \
  --build-arg "REVISION=$revision" --tag "$TAG" "$CONTEXT" 2> >(grep -v -e DEPRECATED -e buildx -e 'docs.docker.com' -e '^ *$' >&2)
arch=$(docker image inspect --format '{{.Os}}/{{.Architecture}}' "$TAG")
if [ "$arch" != "$platform" ]; then
  # The legacy builder makes a FROM scratch image for the daemon's own platform, and
  # refuses --platform for it: write the binary's platform into the image's configuration
  # (docker save, edit, docker load; the layers are unchanged).
  echo "build-image: setting $TAG's platform to $platform (was $arch)"
  SAVED=$(mktemp -d)
  docker save "$TAG" | tar -x -C "$SAVED"
  python3 - "$SAVED" "$platform" <<'PY'
import hashlib, json, os, sys
d, (os_name, arch) = sys.argv[1], sys.argv[2].split("/")
manifest = json.load(open(os.path.join(d, "manifest.json")))
for entry in manifest:
    config = json.load(open(os.path.join(d, entry["Config"])))
    config["os"], config["architecture"] = os_name, arch
    if arch == "arm64":
        config["variant"] = "v8"
    body = json.dumps(config, separators=(",", ":")).encode()
    os.remove(os.path.join(d, entry["Config"]))
    entry["Config"] = hashlib.sha256(body).hexdigest() + ".json"
    open(os.path.join(d, entry["Config"]), "wb").write(body)
json.dump(manifest, open(os.path.join(d, "manifest.json"), "w"))
PY
  docker image rm --no-prune "$TAG" >/dev/null
  tar -C "$SAVED" -c . | docker load --quiet >/dev/null
  rm -rf "$SAVED"
  arch=$(docker image inspect --format '{{.Os}}/{{.Architecture}}' "$TAG")
fi
[ "$arch" = "$platform" ] || die "$TAG is $arch, not $platform"
echo "build-image: $TAG ($platform, $(docker image inspect --format '{{.Size}}' "$TAG") bytes)"
