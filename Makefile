# latticekv — build and test entry points. `make test` is what CI runs (.ci/run).

CARGO ?= cargo
PYTHON ?= python3
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
export CARGO_TERM_COLOR ?= never

.PHONY: test deps build lint unit python-package python-test bench-smoke docker-image docker-test arm64-test bench release run clean

## Everything CI checks: dependencies, formatting, lints, unit/property/integration tests,
## the redis-py suite against a real node, the benchmarks in smoke mode (no thresholds),
## and the partition test in Docker containers.
test: deps lint build unit python-test bench-smoke docker-test

## Tools the tests drive: redis-cli (and redis-server for benchmarks), PostgreSQL's server
## binaries (the backing-store tests start throwaway clusters of their own with them; the
## package's own cluster is never used), the redis and pytest Python packages (and PyYAML, for
## the deploy files' test, with kubernetes-validate, and helm-python-sdk: Helm's engine as a
## library, for the chart's test against real Helm), Chromium (the status page's test), Go
## (the deploy test renders the Helm chart with deploy/helm/render). Installed only when missing.
deps:
	@(command -v redis-cli && command -v redis-server && command -v redis-benchmark) >/dev/null 2>&1 || { \
	  echo "installing redis-tools"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools redis-server) \
	    || { echo "cannot install redis-tools (need root and apt)"; exit 1; }; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing postgresql"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) \
	    || { echo "cannot install postgresql (need root and apt)"; exit 1; }; }
	@$(PYTHON) -c "import redis, pytest, trustme, cloudpickle, yaml, kubernetes_validate, helm_python" 2>/dev/null || \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check redis pytest trustme cloudpickle pyyaml \
	    kubernetes-validate helm-python-sdk
# Status page: crates/cli/tests/status_page.rs loads it in headless Chromium.
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	    || { echo "cannot install chromium (need root and apt)"; exit 1; }; }
# Helm chart check: tests/python/test_deploy.py builds deploy/helm/render (Go, stdlib only).
	@command -v go >/dev/null 2>&1 || { \
	  echo "installing golang-go"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go) \
	    || { echo "cannot install golang-go (need root and apt)"; exit 1; }; }

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) fmt --manifest-path python/Cargo.toml -- --check
	$(CARGO) clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --quiet

build:
	$(CARGO) build --workspace --bins

unit:
	$(CARGO) test --workspace

## The Python package `latticekv` (python/, PyO3 + maturin): an abi3 wheel built in release
## mode into $(TARGET_DIR)/wheels (the only wheel there: older ones are removed first), then
## that wheel installed into $(PYTHON)'s environment, so what the tests import is what ships
## (tests/python/test_wheel.py installs it again into a fresh venv without Rust). maturin is
## installed when missing.
python-package:
	@$(PYTHON) -c "import maturin" 2>/dev/null || \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check maturin
	rm -f $(TARGET_DIR)/wheels/latticekv-*.whl
	CARGO_TARGET_DIR=$(TARGET_DIR) $(PYTHON) -m maturin build --release --quiet \
	  --manifest-path python/Cargo.toml --interpreter $(PYTHON) --out $(TARGET_DIR)/wheels
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
	  $(TARGET_DIR)/wheels/latticekv-*.whl

python-test: build python-package
	LATTICEKV_BIN=$(TARGET_DIR)/debug/latticekv LATTICEKV_WHEEL_DIR=$(TARGET_DIR)/wheels \
	  $(PYTHON) -m pytest -q tests/python

## Every benchmark runs, briefly: criterion benches in test mode (each once, small tables)
## and the Redis comparison for a fraction of a second per case. Performance is reported
## in docs/benchmarks.md from full runs, never asserted here.
bench-smoke: build python-package
	LKV_BENCH_KEYS=10000 LKV_BENCH_UPDATES=2000 $(CARGO) test --benches -p latticekv-lattice -p latticekv-node -p latticekv-store
	bench/compare-redis --smoke --bin $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/cluster --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/redis-families --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/durability --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/consistency --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/redis-benchmark --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/security --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/elasticity --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	$(PYTHON) bench/join_stall.py --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/writeback --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	bench/background --smoke --binary $(TARGET_DIR)/debug/latticekv > /dev/null
	$(PYTHON) bench/serverless --smoke --binary $(TARGET_DIR)/debug/latticekv --python $(PYTHON) > /dev/null
	$(PYTHON) bench/scaling-model --smoke > /dev/null

## The image to ship: a FROM-scratch image of the statically linked release binary, non-root,
## state in the /data volume, tagged latticekv:dev (no registry; docs/operations.md).
## PROFILE=debug builds it faster for trying things out.
docker-image:
	CARGO=$(CARGO) docker/build-image.sh latticekv:dev

## Three nodes in containers on a private network; one is cut off for 30 s while both sides
## take writes, then reconnected: every replica must converge, no acknowledged write lost.
## Then the Compose cluster of deploy/compose, up, checked and down.
## Builds the static binary and the image itself; fails loudly if Docker is not usable;
## removes its containers, networks and image even on failure (docs/cluster-testing.md).
docker-test:
	CARGO=$(CARGO) tests/docker/run.sh

## The arm64 image, built and checked on x86_64 (not part of `test`: a second full build of
## the binary): cross-compiled with Debian's gcc-aarch64-linux-gnu, its binary run under
## qemu-user (docker/test-arm64.sh). Installs the Rust target and those packages if missing.
arm64-test: build
	@rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || \
	  rustup target add aarch64-unknown-linux-gnu
	@(command -v aarch64-linux-gnu-gcc && command -v qemu-aarch64) >/dev/null 2>&1 || { \
	  echo "installing gcc-aarch64-linux-gnu and qemu-user"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    gcc-aarch64-linux-gnu qemu-user) \
	    || { echo "cannot install them (need root and apt)"; exit 1; }; }
	CARGO=$(CARGO) LATTICEKV_BIN=$(TARGET_DIR)/debug/latticekv docker/test-arm64.sh

release:
	$(CARGO) build --release

## Full side-by-side comparison with Redis and the cluster benchmark; rewrite the results
## in docs/benchmarks.md.
bench: release python-package
	bench/compare-redis
	bench/cluster
	bench/durability
	bench/consistency
	bench/redis-benchmark
	bench/security
	bench/writeback
	bench/background --write
	$(PYTHON) bench/serverless --python $(PYTHON)

## The embedded default, as the README says.
run:
	$(CARGO) run --release -- local

clean:
	$(CARGO) clean

## bench-plots: matplotlib, which bench/*'s charts and tests/python/test_bench_plots.py
## use (the scripts would otherwise pip-install it themselves on first use).
.PHONY: deps-plots
deps: deps-plots
deps-plots:
	@$(PYTHON) -c "import matplotlib" 2>/dev/null || \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check matplotlib
