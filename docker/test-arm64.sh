#!/usr/bin/env bash
# The arm64 image's build path, checked on an x86_64 machine: cross-compiles the static
# binary for aarch64-unknown-linux-gnu and builds its image (docker/build-image.sh, which
# checks the binary is static with mimalloc linked in and the image is linux/arm64), then
# runs that very binary under qemu-user: `local` (a memory and a disk node) takes a write
# from this machine's x86_64 CLI, stops cleanly on SIGTERM, and serves the write again
# after a restart on the same data directory.
#
#   docker/test-arm64.sh [TAG]        (default tag: latticekv:arm64-test)
#
# Needs: the Rust target (`rustup target add aarch64-unknown-linux-gnu`), Debian's
# gcc-aarch64-linux-gnu and qemu-user, a Docker engine, and the x86_64 binary
# ($LATTICEKV_BIN, default target/debug/latticekv). PROFILE as for build-image.sh (default
# debug here). Docker cannot run the image itself without binfmt_misc; the binary in it is
# the one run under qemu.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${1:-latticekv:arm64-test}
TARGET=aarch64-unknown-linux-gnu
export PROFILE=${PROFILE:-debug}
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-aarch64-linux-gnu-gcc}
export CC_aarch64_unknown_linux_gnu=${CC_aarch64_unknown_linux_gnu:-aarch64-linux-gnu-gcc}
TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
CLI=${LATTICEKV_BIN:-$TARGET_DIR/debug/latticekv}

die() { echo "test-arm64: $*" >&2; exit 1; }
command -v qemu-aarch64 >/dev/null || die "no qemu-aarch64: apt-get install qemu-user"
command -v aarch64-linux-gnu-gcc >/dev/null || die "no aarch64-linux-gnu-gcc: apt-get install gcc-aarch64-linux-gnu"
[ -x "$CLI" ] || die "no x86_64 CLI at $CLI (cargo build, or set LATTICEKV_BIN)"

TARGET=$TARGET docker/build-image.sh "$TAG"
BIN="$TARGET_DIR/$TARGET/$PROFILE/latticekv"
file -b "$BIN" | grep -q "ARM aarch64" || die "$BIN is not an aarch64 binary: $(file -b "$BIN")"

WORK=$(mktemp -d)
NODE_PID=
cleanup() {
  [ -n "$NODE_PID" ] && kill -KILL "$NODE_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# Starts the arm64 node under qemu on $WORK/data; sets NODE_PID and NATIVE once it is ready.
start_node() {
  rm -f "$WORK/out"
  mkfifo "$WORK/out"
  qemu-aarch64 "$BIN" local --listen 127.0.0.1:0 --resp 127.0.0.1:0 --no-http \
    --workers 2 --data-dir "$WORK/data" >"$WORK/out" 2>"$WORK/err" &
  NODE_PID=$!
  NATIVE=
  exec 3<"$WORK/out"
  while read -r -t 120 first rest <&3; do
    case "$first" in
      native) NATIVE=$rest ;;
      press) break ;;
    esac
  done
  # Keep draining its stdout.
  cat <&3 >/dev/null &
  exec 3<&-
  [ -n "$NATIVE" ] || die "the arm64 node did not start: $(cat "$WORK/err")"
  echo "test-arm64: arm64 node (pid $NODE_PID, under qemu) at $NATIVE"
}

stop_node() {
  kill -TERM "$NODE_PID"
  local code=0
  wait "$NODE_PID" || code=$?
  NODE_PID=
  [ "$code" = 0 ] || die "the arm64 node exited with $code on SIGTERM: $(cat "$WORK/err")"
}

start_node
"$CLI" put greeting "hello from x86_64" --addr "$NATIVE" >/dev/null
got=$("$CLI" get greeting --addr "$NATIVE")
[ "$got" = "hello from x86_64" ] || die "read back '$got'"
stop_node
start_node
got=$("$CLI" get greeting --addr "$NATIVE")
[ "$got" = "hello from x86_64" ] || die "after a restart, read back '$got'"
stop_node
echo "test-arm64: ok ($TAG is linux/arm64; its binary served, stopped and restarted under qemu)"
