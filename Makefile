# korral: two commands on a fresh machine -- `make run` and `make test` (`make test-all`: every test, as CI).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# make run needs only the command line (the cli extra): no test tools, no Ray
RUN_STAMP := $(VENV)/.installed-cli
# quiet: pip's output, and setuptools' "Editable installation" notice (a UserWarning) from the build
PIP := PYTHONWARNINGS=ignore::UserWarning $(BIN)/pip --disable-pip-version-check

.PHONY: run test test-slow test-ray test-all lint typecheck bench clean proto

# The editable install gives the metadata and the `korral` script; scripts/dev_path.py then puts src/ on
# the venv's path as the regular package `korral`, so that a folder named korral (the clone itself,
# beside a script) can never shadow it, and the tests still run the code being edited.
$(STAMP): pyproject.toml scripts/dev_path.py
	@echo "make: installing korral with every extra into $(VENV) (first time only: a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,cli,serve,ray]'
	$(BIN)/python scripts/dev_path.py
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml scripts/dev_path.py
	@echo "make: installing korral and its command line into $(VENV) (first time only)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet --upgrade pip
	@$(PIP) install --quiet -e '.[cli]'
	@$(BIN)/python scripts/dev_path.py
	@touch $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/korral simulate

# coverage by path, not by module name: coverage imports a named package to find it and then drops it from
# sys.modules, so yaml and aiohttp were imported twice and their C extensions kept the first copy's
# classes (configs failed to parse, REST timeouts went unhandled, under make test only)
# two workers (pytest-xdist): the tests wait on timers and other processes as much as they compute, so two
# keep a loaded 2-CPU machine busier.
# Two tiers. make test: lint, types and every test not marked slow, with coverage of model and policies
# (minutes). make test-all (CI, .ci/run): that, then the second tier: the slow tests (long stress, soak,
# limits and simulation runs; pyproject.toml: slow) without the tracer, then the Ray tests on their own.
test: $(STAMP) typecheck
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m pytest -n 2 --dist loadgroup -m "not slow" --cov=src/model --cov=src/policies --cov-report=term --cov-fail-under=90 $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -m "slow and not ray" $(PYTEST_ARGS)

# one at a time, in a pytest of their own: a Ray instance starting beside other tests on a loaded machine
# could miss Ray's own start-up deadline (its raylet must register within 30 s, not configurable)
test-ray: $(STAMP)
	$(BIN)/python -m pytest -m ray $(PYTEST_ARGS)

test-all: test test-slow test-ray

lint: $(STAMP) typecheck
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# mypy, configured in pyproject.toml (strict on the whole korral package). It reads the
# package through build/typecheck/korral -> src: the package-dir mapping hides "korral" from it.
typecheck: $(STAMP)
	mkdir -p build/typecheck && ln -sfn ../../src build/typecheck/korral
	MYPYPATH=build/typecheck $(BIN)/mypy -p korral

bench: $(STAMP)
	$(BIN)/korral bench --workload yunikorn --nodes 1000 --asks 10000

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .coverage

# regenerate src/si/si_pb2.py and si_pb2_grpc.py from src/si/si.proto (pinned grpcio-tools)
proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py
