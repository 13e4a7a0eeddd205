# Everything runs in the project's own virtualenv: the machine may ship an old,
# global Trio that nothing here may depend on.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_DEV := $(VENV)/.installed-test
STAMP_RUN := $(VENV)/.installed-run

.PHONY: demo test lint typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@ $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/python examples/agent_turn.py

lint: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP_DEV)
	$(BIN)/pyright
	$(BIN)/mypy trio_tools tests/typing/accept
	$(BIN)/python tests/typing/check_rejections.py

pytest: $(STAMP_DEV)
	bash .ci/ensure-postgres
	$(BIN)/python -m pytest

test: lint typecheck pytest

bench: $(STAMP_DEV)
	$(BIN)/python benchmarks/bench_dispatch.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
