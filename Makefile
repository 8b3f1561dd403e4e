# korral: two commands on a fresh machine -- `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# make run needs only the command line (the cli extra): no test tools, no Ray
RUN_STAMP := $(VENV)/.installed-cli
# quiet: pip's output, and setuptools' "Editable installation" notice (a UserWarning) from the build
PIP := PYTHONWARNINGS=ignore::UserWarning $(BIN)/pip --disable-pip-version-check

.PHONY: run test lint typecheck bench clean proto

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
# keep a loaded 2-CPU machine busier; every test on the Ray engine goes to one worker (tests/conftest.py)
test: $(STAMP) typecheck
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m pytest -n 2 --dist loadgroup --cov=src/model --cov=src/policies --cov-report=term --cov-fail-under=90 $(PYTEST_ARGS)

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
