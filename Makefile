# Convenience front: every target installs what it needs on first use, then delegates.
#   make figures/pass_at_k.pdf    any Snakemake target, built with the default (cpu) preset
#   make test                     run the test suite (adds veRL and the test tools to the environment)
#   make install                  just the environment for the default run (.venv)
#   make install-test             and what the tests need
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed            # the default run: CPU torch, the engine, the CPU trainer, Snakemake
TEST_STAMP := $(VENV)/.installed-test  # and what the tests import: veRL (on CPU), pytest, hypothesis
TORCH_VERSION ?= 2.13.0
# Where torch comes from: PyTorch's index of CPU-only wheels. When it cannot be reached, or is set empty
# (`make install TORCH_INDEX=`), torch comes from the default package index, which on Linux x86_64 is the
# multi-GB CUDA build unless the machine's pip is configured with a local CPU wheel.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install install-test test FORCE

install: $(STAMP)

install-test: $(TEST_STAMP)

# torch is installed first and pinned to the CPU build: resolving a bare `torch` pulls a CUDA build.
# The index is probed first (20 s) so that an unreachable one costs seconds, not pip's retries.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	@if [ -n "$(TORCH_INDEX)" ] && $(VENV)/bin/python -c "import sys, urllib.request; \
	        urllib.request.urlopen(sys.argv[1].rstrip('/') + '/torch/', timeout=20)" "$(TORCH_INDEX)" 2>/dev/null; then \
	    echo "torch==$(TORCH_VERSION): from $(TORCH_INDEX)"; \
	    $(VENV)/bin/pip install -q --index-url "$(TORCH_INDEX)" "torch==$(TORCH_VERSION)"; \
	else \
	    if [ -n "$(TORCH_INDEX)" ]; then why="the CPU wheel index $(TORCH_INDEX) cannot be reached"; \
	    else why="TORCH_INDEX is empty"; fi; \
	    echo "torch==$(TORCH_VERSION): $$why; installing it from the default package index" \
	         "(a CUDA build unless pip finds a local CPU wheel)" >&2; \
	    $(VENV)/bin/pip install -q "torch==$(TORCH_VERSION)"; \
	fi
	@$(VENV)/bin/python -W ignore -c "import torch; print('installed torch', torch.__version__, \
	    '(CPU build)' if torch.version.cuda is None else '(CUDA ' + torch.version.cuda + ' build)')"
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
