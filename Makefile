# Two commands: `make run` (the default comparison on the synthetic graph) and `make test`.
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
	$(BIN)/python -m benchmarks -m method=single,full_halo,sar model=gcn,sage,gat workers=2 epochs=50 results_dir=$(RESULTS)
	$(BIN)/python -m benchmarks.table $(RESULTS)

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf .cache results/quickstart
