# Two jobs: `make demo` (the main job) and `make test`. Each creates .venv if missing,
# installs the project with torch 2.13.0, and runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NPROC ?= 2
export TORCH_DEVICE_BACKEND_AUTOLOAD = 0

.PHONY: demo test venv proto bench docs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/torchrun --nproc-per-node $(NPROC) --master-addr 127.0.0.1 \
	  --master-port $$($(PY) -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
	  launch/demo.py $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --timeout 600 tests

bench: $(STAMP)
	$(PY) benchmarks/overhead.py

docs: $(STAMP)
	$(PY) -m torchair_dist.configs.reference --write README.md
