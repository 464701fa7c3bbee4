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
# `make test` runs the test files in this many worker processes (pytest-xdist).
TEST_WORKERS ?= 2
# Whole files to each worker, the longest first (tests/file_order.py).
XDIST = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
# The tools after training read a run directory (`make analyze RUN=runs/demo`).
RUN ?= runs/$(REGIME)
# `make probe DATA=tfds:places365_small`, `make check-data DATA=folder:/data/x`;
# digits ships with scikit-learn (offline).
DATA ?= digits
# `make predict IMAGES="a.png photos/ 'scans/*.jpg'"` with the SavedModel in MODEL.
MODEL ?= $(RUN)/export
IMAGES ?=

.PHONY: setup train test test-all test-numerics bench docs clean help export predict probe compare compare-methods analyze \
	check-data

help:
	@echo "make train    train REGIME (default demo; flags/REGIME.flags) with extra ARGS"
	@echo "make export   export RUN as a SavedModel in RUN/export (ARGS=\"--knn --overwrite\")"
	@echo "make predict  top-5 classes of IMAGES (files, folders, globs) with the SavedModel MODEL"
	@echo "make probe    linear probe of RUN's frozen trunk on DATA (default digits) vs a random trunk"
	@echo "make compare  LLP propagation vs kNN, label spreading/propagation, LP_DMT, DLP on RUN's bank"
	@echo "make compare-methods  train every method on REGIME (demo) for seeds 0,1,2; table of top-1"
	@echo "make analyze  aggregation scores and MDS plots of RUN's bank in RUN/analysis"
	@echo "make check-data  decode every image of DATA, name the bad ones (ARGS=\"--write_exclude_list=bad.txt\")"
	@echo "make test     run the test suite but for the tests marked slow (CPU; 208 s on 2 idle cores on 2026-11-30, docs/testing.md)"
	@echo "make test-all run every test, the slow ones too (what CI runs)"
	@echo "make test-numerics  the tests of the numeric kernels' results, of the slow ones those marked kernels (CI reruns them with ONEDNN_MAX_CPU_ISA=AVX2)"
	@echo "make docs     build the docs/ pages into site/ with mkdocs (a warning fails)"
	@echo "make bench    check the benchmarks' harness, then run them at their quick sizes (installs requirements-bench.txt)"
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

export: setup
	$(PY) tools/export.py --run_dir=$(RUN) $(ARGS)

predict: setup
	$(PY) tools/predict.py --model_dir=$(MODEL) $(ARGS) $(IMAGES)

probe: setup
	$(PY) tools/linear_probe.py --run_dir=$(RUN) --dataset=$(DATA) $(ARGS)

compare: setup
	$(PY) tools/compare_propagation.py --run_dir=$(RUN) $(ARGS)

compare-methods: setup
	$(PY) tools/compare_methods.py --regime=$(REGIME) $(ARGS)

analyze: setup
	$(PY) tools/analyze.py --run_dir=$(RUN) $(ARGS)

check-data: setup
	$(PY) tools/check_data.py --dataset=$(DATA) $(ARGS)

# A test file's tests run in one worker, so module fixtures are built once.
test: setup
	$(PY) -m pytest $(XDIST) tests

# pytest.ini leaves out the tests marked slow or bench; this selects all but bench.
test-all: setup
	$(PY) -m pytest $(XDIST) -m "not bench" tests

# The tests whose results depend on the CPU's kernels and summation orders: the bank,
# propagation and losses, the network and its precisions, the augmentation's arithmetic, the
# methods' steps against float64 and one replica against two. CI reruns them with oneDNN at
# AVX2 (.ci/run): those of make test, and of the slow ones only those marked kernels (the
# others are a second case of a path make test runs); the tools, data and run tests do not
# change with the kernels.
NUMERIC_TESTS := tests/core tests/models tests/data/augmentation tests/training/methods/test_llp.py \
	tests/training/test_methods.py tests/after_training/transduction
test-numerics: setup
	$(PY) -m pytest $(XDIST) -m "not bench and (not slow or kernels)" \
		$(NUMERIC_TESTS)

docs: setup
	$(PY) -m mkdocs build --strict

bench: setup $(VENV)/.bench-installed
	$(PY) -m pytest -m bench tests/benchmarks
	$(PY) benchmarks/bench_core.py
	$(PY) benchmarks/bench_input.py
	$(PY) benchmarks/bench_train_step.py
	$(PY) benchmarks/bench_probe.py
	$(PY) benchmarks/bench_scale.py
	$(PY) benchmarks/bench_bank_checkpoint.py

clean:
	rm -rf $(VENV) .pytest_cache site
