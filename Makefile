# trainstack: `make run` trains the default job here, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install browser bytecode run test bench lint format clean

install: $(STAMP) browser

# Debian's chromium + chromium-driver for the dashboard's browser tests (tests/api); a no-op
# when both are there. Selenium never downloads a browser of its own.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

# Reinstall only when the dependency pins change; -e keeps conf/ and the code live.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[all]'
	$(MAKE) --no-print-directory bytecode
	touch $(STAMP)

# pip byte-compiles what it installs, but not an editable checkout: without this every
# `trainstack` start compiles the project's modules again when PYTHONDONTWRITEBYTECODE is set.
# A module edited later just compiles in memory until the next `make bytecode`.
bytecode:
	$(BIN)/python -m compileall -q -j 0 catalog hydra_plugins infra jobs trainer

run: $(STAMP)
	$(BIN)/trainstack launch

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) runs outputs multirun
