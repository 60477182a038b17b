# Convenience front: every target installs the environment on first use, then delegates.
#   make test                     run the test suite
#   make figures/pass_at_k.pdf    any Snakemake target, built with the default (cpu) preset
#   make install                  just the environment (.venv)
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: install test FORCE

install: $(STAMP)

# torch is installed first and pinned to the CPU build: resolving a bare `torch` pulls a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[cpu,verl,workflow,dev]"
	touch $@

test: $(STAMP)
	$(VENV)/bin/python -m pytest

# Snakemake decides what is stale; make only makes sure the environment exists.
figures/%: $(STAMP) FORCE
	$(VENV)/bin/snakemake --cores all $@

results/%: $(STAMP) FORCE
	$(VENV)/bin/snakemake --cores all $@

report.html: $(STAMP) FORCE
	$(VENV)/bin/snakemake --report $@

FORCE:
