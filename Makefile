# Two jobs: `make demo` (the main job) and `make test`. Each creates .venv if missing,
# installs the project with torch 2.13.0, and runs. `TORCH=<version>` runs either with another
# torch of the supported range in its own venv (.venv-torch<version>), e.g.
# `make test TORCH=2.11.0` (CI runs the suite on 2.11.0, 2.13.0 and 2.14.1: .ci/run).
# `PY=<interpreter>` on the command line (e.g. `make gpu-check PY=python3` on a machine with no
# network) uses that interpreter as it is for test / gpu-check / npu-check: no venv, no pip,
# the project from this source tree (PYTHONPATH=.).
PYTHON ?= python3
TORCH ?=
TORCH_VERSION := $(if $(TORCH),$(TORCH),2.13.0)
VENV := $(if $(TORCH),.venv-torch$(TORCH),.venv)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-torch$(TORCH_VERSION)
ifeq ($(origin PY),command line)
READY :=
FROM_TREE := PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}
else
READY := $(STAMP)
FROM_TREE :=
endif
NPROC ?= 2
export TORCH_DEVICE_BACKEND_AUTOLOAD = 0

.PHONY: lint demo serve serve-engine test venv proto registry bench opinfo docs docs-site gpu-check npu-check

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e '.[test,demo]'
	$(PY) -c "import torch, sys; v = torch.__version__.split('+')[0]; sys.exit(0 if v == '$(TORCH_VERSION)' else 'pip replaced torch $(TORCH_VERSION) with ' + v)"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/torchrun --nproc-per-node $(NPROC) --master-addr 127.0.0.1 \
	  --master-port $$($(PY) -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
	  launch/demo.py $(ARGS)

# The serving loop (launch/serve.py): continuous batching of a synthetic request stream on NPROC
# ranks, every variant side by side in one run; writes $(SERVE_OUT)/serve.png and serve.json.
# ARGS passes options (launch/serve.py --help), e.g. ARGS="--preset small --requests 48".
SERVE_OUT ?= build/serve
serve: $(STAMP)
	mkdir -p $(SERVE_OUT)
	$(VENV)/bin/torchrun --nproc-per-node $(NPROC) --master-addr 127.0.0.1 \
	  --master-port $$($(PY) -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
	  launch/serve.py --plot $(SERVE_OUT)/serve.png --json $(SERVE_OUT)/serve.json $(ARGS)

# The same request stream served by transformers' own engine (launch/serve_engine.py: continuous
# batching of token batches, paged KV cache), eager / inductor / ours side by side, a process each;
# writes $(SERVE_OUT)/serve_engine.png and serve_engine.json. ARGS as for serve.
serve-engine: $(STAMP)
	mkdir -p $(SERVE_OUT)
	$(PY) launch/serve_engine.py --plot $(SERVE_OUT)/serve_engine.png \
	  --json $(SERVE_OUT)/serve_engine.json $(ARGS)

# TESTS: which test directories (default: all of them)
TESTS ?= tests
test: $(READY)
	$(FROM_TREE) $(PY) -m pytest -q -n 2 --dist loadfile --timeout 600 $(TESTS)

# PyTorch's OpInfo suite through every mode and dtype (benchmarks/opinfo_sweep.py, ~10 min):
# fails on any wrong result or error. OPINFO_ARGS="--write-page docs/coverage/opinfo.md"
# regenerates the coverage page's tables from the same run (each with its date and command).
opinfo: $(STAMP)
	$(PY) benchmarks/opinfo_sweep.py --check --dtype float32 $(OPINFO_ARGS)
	$(PY) benchmarks/opinfo_sweep.py --check --dtype bfloat16 $(OPINFO_ARGS)
	$(PY) benchmarks/opinfo_sweep.py --check --dtypes float16 int32 int64 bool $(OPINFO_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/overhead.py

# The device checks + the interleaved decode benchmark on one GPU / NPU (exit 0 pass, 1 a check
# failed, 2 no such device; ARGS=--dry-run runs them on CPU with the recording stand-in).
# On a device machine with its own torch: `make gpu-check PY=python3` (no venv, no pip).
gpu-check: $(READY)
	$(FROM_TREE) $(PY) scripts/device_check.py --device cuda $(ARGS)

npu-check: $(READY)
	$(FROM_TREE) $(PY) scripts/device_check.py --device npu $(ARGS)

# Regenerate the committed GE protobuf module (pinned protoc: its output loads on protobuf 4.21+).
GE_PROTO_DIR := torchair_dist/backends/ge/proto
GRPC_TOOLS_DIR := build/grpc_tools_1_62
proto: $(STAMP)
	test -d $(GRPC_TOOLS_DIR)/grpc_tools || $(PY) -m pip install -q --no-deps --target $(GRPC_TOOLS_DIR) grpcio-tools==1.62.3
	PYTHONPATH=$(GRPC_TOOLS_DIR) $(PY) -m grpc_tools.protoc -I $(GE_PROTO_DIR) --python_out=$(GE_PROTO_DIR) $(GE_PROTO_DIR)/ge_ir.proto

# Regenerate the bundled GE op registry subset from the full registry (REGISTRY=<path>; by default
# the one backends/ge/registry_check.py finds: $TORCHAIR_DIST_GE_REGISTRY, else CI's beside the checkout).
registry: $(STAMP)
	$(PY) -m torchair_dist.backends.ge.registry_subset $(if $(REGISTRY),--registry $(REGISTRY))

# Regenerate the documentation's generated sections (config reference, stage table, environment
# variables, TorchAir surface) in their pages under docs/ (tests/unit/test_docs.py checks them).
docs: $(STAMP)
	$(PY) -m torchair_dist.tools.docs --write .

# The documentation site: the pinned tools (docs/requirements.txt) in their own venv, then a strict
# build (a broken link or anchor between pages fails it) into build/site/.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed
$(DOCS_STAMP): docs/requirements.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q -r docs/requirements.txt
	touch $(DOCS_STAMP)

docs-site: $(DOCS_STAMP)
	$(DOCS_VENV)/bin/mkdocs build --strict

# The linter (ruff, configured in pyproject.toml: pycodestyle + pyflakes, lines up to 120).
lint: $(READY)
	$(PY) -m ruff check torchair_dist tests benchmarks launch scripts
