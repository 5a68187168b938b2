# Everything a fresh clone needs: `make demo` and `make test` create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: venv native demo test test-slow lint bench clean image compose-up compose-down test-compose docs dist smoke

$(STAMP): pyproject.toml
	@command -v cargo >/dev/null || { echo "make venv: cargo is missing: building smr from source compiles smr._native (native/, Rust); install a Rust toolchain (rustup.rs) and run make again" >&2; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip uninstall --quiet --yes smr 2>/dev/null || true  # the name before smr-ring
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,spark,docs]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

# Rebuild smr._native after a change to native/ (cargo builds only what changed).
native: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps -e .

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check smr ring checkpoint tests bench examples docs/_hooks docs/conftest.py
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest -q -rs

# The documentation site (mkdocs.yml, docs/): built into site/, any warning an error.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The release: a wheel and an sdist in dist/ (the wheel built from the sdist, so the sdist
# is known to be complete); smoke installs the wheel into a fresh virtualenv outside the
# checkout and follows docs/getting-started.md's first job with it (.ci/release-smoke).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist

smoke: dist
	PYTHON=$(PYTHON) .ci/release-smoke

# The tests marked slow (real-process scenarios of 7 s or more each: kills, partitions,
# moves and joins, Spark drivers, autoscaling cycles); CI runs them after `make test`, which
# keeps the rest (unit, property and the shorter end-to-end tests) under 10 minutes.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -rs -m slow

# The compose cluster (compose/): `make image` builds smr's image with no registry (a
# debootstrapped base, then wheels built here; cached, so a second run takes seconds);
# compose-up starts four nodes and a Spark standalone master and worker, and returns once
# each node answers and the worker has registered; test-compose runs the tests marked
# compose, tests/compose/test_compose*.py (Docker needed; CI runs them after test-slow).
COMPOSE := $(BIN)/docker-compose -f compose/docker-compose.yml

image: $(STAMP)
	compose/build-image.sh $(BIN)/python

# The compose ring's keys, made once (compose/keys is never committed).
compose/keys: $(STAMP)
	$(BIN)/smr keys init compose

compose-up: image compose/keys
	$(COMPOSE) up -d --wait

compose-down: $(STAMP)
	$(COMPOSE) --profile '*' down -v --remove-orphans

test-compose: image compose/keys
	$(BIN)/python -m pytest -q -m compose

# Each script also runs alone; results (JSON and PNG) go to bench/results/.
bench: $(STAMP)
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/checkpoint.py
	$(BIN)/python bench/recovery.py
	$(BIN)/python bench/soak.py
	$(BIN)/python bench/soak.py --seconds 600 --fault-every-s 60
	$(BIN)/python bench/hwm_growth.py
	$(BIN)/python bench/restore.py
	$(BIN)/python bench/output_table.py
	$(BIN)/python bench/spark_baselines.py throughput
	$(BIN)/python bench/spark_throughput.py
	$(BIN)/python bench/spark_batch_size.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/client.py
	$(BIN)/python bench/security.py
	$(BIN)/python bench/fuzz_decoders.py
	$(BIN)/python bench/spark_recovery.py
	$(BIN)/python bench/false_deaths.py
	$(BIN)/python bench/snapshot_stall.py
	$(BIN)/python bench/rebalance.py
	$(BIN)/python bench/autoscale.py
	$(BIN)/python bench/autoscale_live.py --duration-s 180
	$(BIN)/python bench/autoscale_live.py --duration-s 180 --patterns square,sine \
		--policies static+kill,capacity+kill --out bench/results/autoscale_live_kill.json
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site dist *.egg-info
