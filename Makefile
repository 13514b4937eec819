# wattbench: the two commands are `make run` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PLAN   ?= plans/default.yaml
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home

.PHONY: run test test-browser ui bench install validate clean lint

$(STAMP): pyproject.toml agent/pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "wattbench needs $(PYTHON) on PATH (or: make PYTHON=python3)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ./agent -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# the instance's storage is created here, once and under a lock, so that `make ui` and `make run` can start together
$(DAGSTER_HOME)/dagster.yaml: dagster.yaml $(STAMP)
	@mkdir -p $(DAGSTER_HOME) data
	cp dagster.yaml $@
	$(BIN)/python -c "from pipelines.instance import open_instance; open_instance()"

run: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/wattbench run --plan $(PLAN)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# ruff's lint rules and format check, as configured in pyproject.toml [tool.ruff]
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# the Dagster UI in headless Chromium (also part of `make test`); refreshes the screenshots in docs/img/
test-browser: $(STAMP)
	WATTBENCH_SCREENSHOTS=docs $(BIN)/python -m pytest -q -m browser tests/browser $(PYTEST_ARGS)

ui: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

validate: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster definitions validate -w workspace.yaml

bench: $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[bench]'
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .dagster_home data
