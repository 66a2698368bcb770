# sim2dl: every target does its own set-up. `make demo` runs the workflow on config/config.yaml,
# `make test` runs the test suite. The environment is a venv in the repo built from pinned packages,
# installed by uv: it fetches and unpacks in parallel, 42 s against pip's 117 s for the same set on 2 cores
# (a fresh venv, nothing cached); --no-cache as pip here keeps no copy (uv's cache held 4.3 GB), and
# --compile-bytecode as pip does, since this machine class turns Python's own bytecode cache off.
SHELL := /bin/bash
PYTHON ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
# every package after uv itself (the comment above says why these options)
UV_INSTALL := $(BIN)/uv pip install --quiet --no-cache --compile-bytecode --python $(BIN)/python
STAMP := $(VENV)/.sim2dl-env
CORES ?= 2
# The venv's MPI (MPICH ABI, from PyPI) must win over any system MPI on PATH.
ROOT_APT := scripts/apt_ensure.sh
RUN := PATH="$(BIN):$$PATH" TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2

.PHONY: env demo test test-fast lint bench bench-check image clean-demo

env: $(STAMP)

$(STAMP): requirements/base.in requirements/image.in requirements/constraints.txt pyproject.toml scripts/build_horovod.sh scripts/patches/horovod-0.28.1-tf2.21-cpu.patch
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check "uv" -c requirements/constraints.txt
	$(UV_INSTALL) -r requirements/base.in -c requirements/constraints.txt
	scripts/build_horovod.sh $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

# CONFIG=my.yaml: the workflow on that config. With a container runtime configured, the image is pulled
# first when the runtime lacks it (sim2dl image pull --missing; nothing to do for runtime none).
demo: env
	$(RUN) $(BIN)/sim2dl image pull --missing $(if $(CONFIG),--config $(CONFIG)) >/dev/null
	$(RUN) $(BIN)/snakemake --cores $(CORES) --printshellcmds --rerun-incomplete $(if $(CONFIG),--configfile $(CONFIG)) $(SNAKEMAKE_ARGS)

# The PyTorch reader test (docs/reading.md) needs torch: the CPU build where this machine class keeps it
# (/opt/wheels; a plain `torch` requirement would pull gigabytes of CUDA libraries). Where there is none,
# that test skips (and fails under CI=true).
TORCH_CPU := torch==2.13.0+cpu
# uv as for the venv (where pip looks for local wheels, PIP_FIND_LINKS, uv is told to look too).
TORCH_ENSURE := $(BIN)/python -c "import torch" 2>/dev/null || $(UV_INSTALL) $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS)) "$(TORCH_CPU)" -c requirements/constraints.txt 2>/dev/null || echo "no CPU build of torch to install: the PyTorch reader test will not run"

# TEST_WORKERS: pytest-xdist workers (tests/conftest.py, pytest_xdist_make_scheduler, says how they share
# the work); 1 runs the suite in one process.
TEST_WORKERS ?= 2
# Each of the suite's Python processes (a step's ranks, Snakemake, launchers: 35 in the demo workflow's test)
# reads the project's modules compiled, as Python does by default, where this machine class's environment
# turns the bytecode cache off (PYTHONDONTWRITEBYTECODE=1): compiling all of pipeline/ took 0.36 CPU-s of
# an import's 1.0 (git and .containerignore leave __pycache__ out).
TEST_RUN := $(RUN) PYTHONDONTWRITEBYTECODE=
test: env
	$(TORCH_ENSURE)
	$(RUN) $(BIN)/ruff check .
	$(RUN) $(BIN)/ruff format --check .
	$(TEST_RUN) $(BIN)/pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --no-loadscope-reorder) $(PYTEST_ARGS)

# Before each commit: the unit and mpi tiers (tests/conftest.py says which test is in which tier), on
# TEST_WORKERS workers as `make test` (the reader test among them: torch too, or a fresh clone's CI=true
# run fails there).
test-fast: env
	$(TORCH_ENSURE)
	$(RUN) $(BIN)/ruff check .
	$(RUN) $(BIN)/ruff format --check .
	$(TEST_RUN) $(BIN)/pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --no-loadscope-reorder) -m "unit or mpi" $(PYTEST_ARGS)

# Python (ruff) and the workflow (Snakemake's linter: no lints, which exits non-zero otherwise)
lint: env
	$(RUN) $(BIN)/ruff check .
	$(RUN) $(BIN)/ruff format --check .
	$(RUN) $(BIN)/snakemake --lint

# The container image (root; debootstrap + bubblewrap from apt): containers/build/NAME_TAG/
image: env
	$(ROOT_APT) debootstrap=debootstrap bwrap=bubblewrap mksquashfs=squashfs-tools
	$(RUN) $(BIN)/sim2dl image build --format squashfs $(IMAGE_ARGS)

bench: env
	for b in bench/[a-z]*.py; do [ $$b = bench/common.py ] || $(RUN) $(BIN)/python $$b --quick || exit 1; done
	$(RUN) $(BIN)/python bench/scale.py --layouts --quick

# The quick benchmarks a change touched, run alternately on a base commit (BASE=, default the commit
# bench/recorded.json was made at) and on the working tree, each headline figure compared as a ratio
# (bench/check.py says how). BENCH="merge read" runs those whatever changed; RECORD=1 records them anew into
# bench/recorded.json (3 runs each: history and the docs' tables). Not part of `make test`.
bench-check: env
	$(RUN) $(BIN)/python bench/check.py $(if $(RECORD),--record) $(if $(BASE),--base $(BASE)) $(BENCH)

clean-demo:
	rm -rf results/demo
