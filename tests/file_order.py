"""The order in which pytest-xdist hands test files to its workers: longest first.

`make test` and `make test-all` give each worker whole files (``--dist loadfile``) in
collection order (``--no-loadscope-reorder``). A file of a few long tests handed out last
runs alone while the other worker idles, so `longest_first` puts the files measured longest
first (the longest-processing-time rule: the run ends within 4/3 of the best split).
"""

#: Seconds of a file's tests that `make test` runs and of those marked slow, summed over the
#: tests with their fixtures' set-up (which lands on a file's first test that asks), for the
#: files over 15 s. Measured on 2026-11-30 on the idle 2-core EPYC (`pytest -n 2 --dist
#: loadfile -m "not bench" --durations=0 tests`, after the step tests' host iterators); a file
#: missing here or a time gone stale only moves the file in the order.
SECONDS = {
    "tests/training/test_multi_worker.py": (0, 393),
    "tests/training/methods/test_llp_shard_bank.py": (53, 144),
    "tests/training/test_assembly.py": (16, 153),
    "tests/training/methods/test_two_stream_runs.py": (2, 152),
    "tests/training/test_methods.py": (20, 96),
    "tests/cli/test_compare_methods_tool.py": (3, 93),
    "tests/training/methods/test_mean_teacher.py": (10, 80),
    "tests/training/test_label_safety.py": (0, 85),
    "tests/training/test_crash_resume.py": (0, 83),
    "tests/training/test_sliced_checkpoint.py": (27, 54),
    "tests/test_layers.py": (59, 0),
    "tests/test_packaging.py": (0, 55),
    "tests/training/test_preemption.py": (10, 40),
    "tests/training/methods/test_pseudo_label.py": (11, 37),
    "tests/cli/test_train_tool.py": (14, 25),
    "tests/data/pipeline/test_input_fns.py": (29, 10),
    "tests/core/test_bank_slices.py": (1, 31),
    "tests/training/methods/test_fixmatch.py": (18, 9),
    "tests/data/pipeline/test_data_service.py": (13, 9),
    "tests/core/test_bank_contract.py": (13, 4),
    "tests/data/pipeline/test_streams.py": (13, 3),
}


def _file(item):
    return item.nodeid.split("::")[0]


def longest_first(items):
    """Reorders ``items`` (pytest's selected items) in place: whole files, longest first
    by `SECONDS` (a file's slow part counts when one of its slow tests is selected); files
    not listed keep their order after those listed."""
    slow = {_file(item) for item in items if item.get_closest_marker("slow") is not None}
    first = {}
    for item in items:
        first.setdefault(_file(item), len(first))

    def key(item):
        fast, slow_part = SECONDS.get(_file(item), (0.0, 0.0))
        return -(fast + (slow_part if _file(item) in slow else 0.0)), first[_file(item)]

    items.sort(key=key)
