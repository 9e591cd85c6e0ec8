# The two commands of the README: `make run` (the default job) and `make test`.
# Each sets up .venv on a fresh machine first. EXTRAS=gpu installs the GPU build instead of the CPU one.
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?= cpu
ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(EXTRAS)
# The reference the VAD test compares with: the silero-vad package, whose get_speech_timestamps needs
# torch (not torchaudio: the test hands it samples). torch==2.13.0 is the CPU build these machines
# keep on disk (pip takes it from there in about a minute); a bare `torch` would fetch a CUDA build
# of several GB. --no-deps: silero-vad asks only for torch and packaging, both here by then.
VAD_REFERENCE := $(VENV)/.vad-reference

.PHONY: run test validate doctor clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS),test]"
	rm -f $(VENV)/.installed-*
	touch $@

$(VAD_REFERENCE): $(STAMP)
	$(BIN)/python -m pip install --quiet torch==2.13.0 packaging
	$(BIN)/python -m pip install --quiet --no-deps silero-vad==6.2.3
	touch $@

run: $(STAMP)
	$(BIN)/python run_pipeline.py $(ARGS)

test: $(STAMP) $(VAD_REFERENCE)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(ARGS)

validate: $(STAMP)
	$(BIN)/python run_pipeline.py validate -c configs/default.yaml
	$(BIN)/python run_pipeline.py validate -c configs/matting.yaml
	$(BIN)/python run_pipeline.py validate -c configs/yolox.yaml
	$(BIN)/python run_pipeline.py validate -c configs/ocr.yaml
	$(BIN)/python run_pipeline.py validate -c configs/tracking.yaml

	$(BIN)/python run_pipeline.py validate -c configs/lipsync.yaml
	$(BIN)/python run_pipeline.py validate -c configs/speaking.yaml

# What a user with a GPU runs first (docs/gpu.md): driver, CUDA, TensorRT, ONNX Runtime providers,
# a tiny engine against the CPU, a short benchmark of the config's model. EXTRAS=gpu for the GPU build.
doctor: $(STAMP)
	$(BIN)/python run_pipeline.py doctor $(ARGS)

clean:
	rm -rf out .pytest_cache
