# One entry point for everything. Every target depends on `setup`, so a fresh
# clone needs nothing but `make train` or `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# `make setup CUDA=1` installs TensorFlow's CUDA build (Linux + NVIDIA GPU).
CUDA ?= 0
# `make train REGIME=r18_p10_q100 ARGS="--data_dir=..."`; a flagfile in flags/.
REGIME ?= demo
ARGS ?=

.PHONY: setup train test bench clean help

help:
	@echo "make train    train REGIME (default demo; flags/REGIME.flags) with extra ARGS"
	@echo "make test     run the test suite (CPU, a few minutes)"
	@echo "make bench    run the benchmarks in tools/ (installs requirements-bench.txt)"
	@echo "make setup    create $(VENV) and install requirements.txt (CUDA=1 for GPU)"

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	if [ "$(CUDA)" = "1" ]; then $(PY) -m pip install --quiet "tensorflow[and-cuda]==$$(sed -n 's/^tensorflow==//p' requirements.txt)"; fi
	touch $@

$(VENV)/.bench-installed: requirements-bench.txt $(VENV)/.installed
	$(PY) -m pip install --quiet -r requirements-bench.txt
	touch $@

train: setup
	$(PY) tools/train.py --regime=$(REGIME) $(ARGS)

test: setup
	$(PY) -m pytest tests

bench: setup $(VENV)/.bench-installed
	$(PY) tools/bench_core.py
	$(PY) tools/bench_input.py
	$(PY) tools/bench_train_step.py

clean:
	rm -rf $(VENV) .pytest_cache
