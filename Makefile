# The two commands of the README: `make run` (the default job) and `make test`.
# Each sets up .venv on a fresh machine first. EXTRAS=gpu installs the GPU build instead of the CPU one.
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?= cpu
ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(EXTRAS)

.PHONY: run test validate doctor clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS),test]"
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(BIN)/python run_pipeline.py $(ARGS)

test: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(ARGS)

validate: $(STAMP)
	$(BIN)/python run_pipeline.py validate -c configs/default.yaml
	$(BIN)/python run_pipeline.py validate -c configs/matting.yaml
	$(BIN)/python run_pipeline.py validate -c configs/yolox.yaml
	$(BIN)/python run_pipeline.py validate -c configs/ocr.yaml
	$(BIN)/python run_pipeline.py validate -c configs/tracking.yaml

# What a user with a GPU runs first (docs/gpu.md): driver, CUDA, TensorRT, ONNX Runtime providers,
# a tiny engine against the CPU, a short benchmark of the config's model. EXTRAS=gpu for the GPU build.
doctor: $(STAMP)
	$(BIN)/python run_pipeline.py doctor $(ARGS)

clean:
	rm -rf out .pytest_cache
