# Two commands: `make run` (the quickstart comparison on the synthetic graph, then its report) and `make test`
# (every test: what CI runs). `make test-fast` is the fast tier to run while you work (about 50 s here: the
# in-process unit tests, files marked `pytestmark = pytest.mark.fast`; no process spawned).
# All create .venv and install the project the first time. torch==2.13.0 (CPU) is installed
# unless the venv already has a torch (GPU users: create .venv and install your torch first).
# pip byte-compiles at install on purpose: where PYTHONDONTWRITEBYTECODE is set (as on the machines
# this suite is developed and tested on), Python never writes a .pyc, so without the install's every
# fresh interpreter compiles torch and the rest again (9.1 s against 3.6 s to import them; a clean
# clone's tests took 9 min 7 s with pip's --no-compile, 7 min 2 s without, 2026-12-06).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
TORCH_SPEC ?= torch==2.13.0
RESULTS ?= results/quickstart

.PHONY: run test test-fast gpu-check install clean

install: $(TEST_STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e .
	touch $(STAMP)

# the test extras (pytest, a Jupyter kernel for the notebook tests) only where tests run: `make run` needs none
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(TEST_STAMP)

run: $(STAMP)
	@# every registered method (conf/experiment/quickstart.yaml); the report is written even if a run failed
	$(BIN)/python -m benchmarks.commands.sweep experiment=quickstart results_dir=$(RESULTS); status=$$?; \
	$(BIN)/python -m analysis report $(RESULTS) && exit $$status

# One pytest-xdist worker per core this process may use (nproc: the affinity mask, which xdist's `auto`
# ignores where psutil is installed), at most 8, each kept to its core (tests/conftest.py), a test file a
# worker (--dist loadfile: a file's module-scoped oracles and fixtures stay in one process);
# TEST_WORKERS=0: one process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 8 ] && n=8; echo $$n)
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test: $(TEST_STAMP)
	$(PYTEST)

test-fast: $(TEST_STAMP)
	$(PYTEST) -m fast

gpu-check: $(STAMP)
	@# the CUDA/NCCL paths CI cannot run (benchmarks/tools/gpu_check.py): one rank per GPU; never part of `make test`
	$(BIN)/python -m benchmarks.tools.gpu_check

clean:
	rm -rf .cache results/quickstart
