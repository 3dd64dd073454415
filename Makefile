# trainstack: `make run` trains the default job here, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs: `make run` needs the `local` extra only (torch, Hydra, the trainer's and the
# local CLI's dependencies); `make test` and `make install` everything the suite needs (`all`).
STAMP := $(VENV)/.installed-stamp
RUN_STAMP := $(VENV)/.installed-local-stamp
# A venv that already has everything needs no second install for `make run`.
RUN_DEPS := $(if $(wildcard $(STAMP)),$(STAMP),$(RUN_STAMP))
PIP_INSTALL := $(BIN)/python -m pip install --progress-bar on -c constraints.txt

.PHONY: install browser bytecode run test bench lint format clean cluster-up cluster-down

install: $(STAMP) browser

# Debian's chromium + chromium-driver for the dashboard's browser tests (tests/api); a no-op
# when both are there. Selenium never downloads a browser of its own.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

# Reinstall only when the dependency pins change; -e keeps conf/ and the code live. pip's
# own progress (each package, download bars) shows: the full install is large.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e '.[all]'
	$(MAKE) --no-print-directory bytecode
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e '.[local]'
	$(MAKE) --no-print-directory bytecode
	touch $(RUN_STAMP)

# pip byte-compiles what it installs, but not an editable checkout: without this every
# `trainstack` start compiles the project's modules again when PYTHONDONTWRITEBYTECODE is set.
# A module edited later just compiles in memory until the next `make bytecode`.
bytecode:
	$(BIN)/python -m compileall -q -j 0 catalog contract hydra_plugins infra jobs trainer

# `trainstack` lives in the venv: the last lines say how to put it on PATH (also after a
# failed run, which is when `trainstack logs` is wanted).
run: $(RUN_DEPS)
	@$(BIN)/trainstack launch; status=$$?; \
	echo; \
	echo "trainstack is installed in $(VENV): activate it, then look at the run:"; \
	echo "  . $(VENV)/bin/activate"; \
	echo "  trainstack runs                 # every run here, with its state, step and loss"; \
	echo "  trainstack status <run>         # trainstack logs <run>, trainstack plot <run>"; \
	exit $$status

# The unit suite, then the end-to-end suite (tests/e2e) against the real components. Their Go
# build (tens of minutes on a fresh machine, nothing once cached) starts first, niced in the
# background and in its own process group (killed if `make test` stops early), so that it runs
# beside the install and the unit suite. It needs only the standard library: the system python
# runs it before the venv exists.
test:
	@mkdir -p .cluster; \
	setsid nice -n 10 $(PYTHON) -m localcluster.build > .cluster/build.log 2>&1 & build=$$!; \
	trap 'kill -- -$$build 2>/dev/null' EXIT; \
	$(MAKE) --no-print-directory $(STAMP) browser || exit 1; \
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports --no-cache \
		&& $(BIN)/mypy || exit 1; \
	$(BIN)/python -m pytest --ignore=tests/e2e; unit=$$?; \
	echo "make test: the local cluster's build (.cluster/build.log):"; \
	wait $$build; built=$$?; tail -n 9 .cluster/build.log; \
	if [ $$built -ne 0 ]; then echo "make test: the build failed, so tests/e2e cannot run"; exit 1; fi; \
	TRAINSTACK_E2E=1 $(BIN)/python -m pytest tests/e2e; e2e=$$?; \
	[ $$unit -eq 0 ] && [ $$e2e -eq 0 ]

# A real control plane on this machine (localcluster/): etcd, the Kubernetes control plane, kwok
# and the JobSet, Kubeflow Trainer, Kueue and Training Operator controllers, built from their Go
# modules at the pinned versions (needs Go; the first build takes minutes, cached after) and run
# as local processes on 127.0.0.1. Writes .cluster/kubeconfig and the `stack=local` stack file.
cluster-up: $(STAMP)
	$(BIN)/python -m localcluster up

cluster-down:
	$(BIN)/python -m localcluster down

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
