# Two commands: `make run` (the quickstart comparison on the synthetic graph, then its report) and `make test`.
# Both create .venv and install the project the first time. torch==2.13.0 (CPU) is installed
# unless the venv already has a torch (GPU users: create .venv and install your torch first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TORCH_SPEC ?= torch==2.13.0
RESULTS ?= results/quickstart

.PHONY: run test install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	@# every registered method (conf/experiment/quickstart.yaml); the report is written even if a run failed
	$(BIN)/python -m benchmarks.sweep experiment=quickstart results_dir=$(RESULTS); status=$$?; \
	$(BIN)/python -m analysis report $(RESULTS) && exit $$status

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf .cache results/quickstart
