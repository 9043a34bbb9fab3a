# latticekv — build and test entry points. `make test` is what CI runs (.ci/run).

CARGO ?= cargo
PYTHON ?= python3
export CARGO_TERM_COLOR ?= never

.PHONY: test deps build lint unit python-test release run clean

## Everything CI checks: dependencies, formatting, lints, unit/property/integration tests,
## and the redis-py suite against a real node.
test: deps lint build unit python-test

## Tools the tests drive: redis-cli (and redis-server for benchmarks), the redis and pytest
## Python packages. Installed only when missing.
deps:
	@command -v redis-cli >/dev/null 2>&1 || { \
	  echo "installing redis-tools"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools redis-server) \
	    || { echo "cannot install redis-tools (need root and apt)"; exit 1; }; }
	@$(PYTHON) -c "import redis, pytest" 2>/dev/null || \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check redis pytest

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

build:
	$(CARGO) build --workspace --bins

unit:
	$(CARGO) test --workspace

python-test: build
	LATTICEKV_BIN=$(CURDIR)/target/debug/latticekv $(PYTHON) -m pytest -q tests/python

release:
	$(CARGO) build --release

## The embedded default, as the README says.
run:
	$(CARGO) run --release -- local

clean:
	$(CARGO) clean
