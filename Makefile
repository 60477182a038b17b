# Convenience front: every target installs what it needs on first use, then delegates.
#   make figures/pass_at_k.pdf    any Snakemake target, built with the default (cpu) preset
#   make test                     run the test suite (adds veRL and the test tools to the environment)
#   make install                  just the environment for the default run (.venv)
#   make install-test             and what the tests need
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed            # the default run: CPU torch, the engine, the CPU trainer, Snakemake
TEST_STAMP := $(VENV)/.installed-test  # and what the tests import: veRL (on CPU), pytest, hypothesis

.PHONY: install install-test test FORCE

install: $(STAMP)

install-test: $(TEST_STAMP)

# torch is installed first and pinned to the CPU build: resolving a bare `torch` pulls a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[cpu,workflow]"
	touch $@

$(TEST_STAMP): $(STAMP)
	$(VENV)/bin/pip install -q -e ".[cpu,verl,workflow,dev]"
	touch $@

test: $(TEST_STAMP)
	$(VENV)/bin/python -m pytest

# Snakemake decides what is stale; make only makes sure the environment exists.
figures/%: $(STAMP) FORCE
	$(VENV)/bin/snakemake --cores all $@

results/%: $(STAMP) FORCE
	$(VENV)/bin/snakemake --cores all $@

report.html: $(STAMP) FORCE
	$(VENV)/bin/snakemake --report $@

FORCE:
