"""The order in which pytest-xdist hands test files to its workers: longest first.

`make test` and `make test-all` give each worker whole files (``--dist loadfile``) in
collection order (``--no-loadscope-reorder``). A file of a few long tests handed out last
runs alone while the other worker idles, so `longest_first` puts the files measured longest
first (the longest-processing-time rule: the run ends within 4/3 of the best split).
"""

#: Seconds of a file's tests that `make test` runs and of those marked slow, summed over the
#: tests with their fixtures' set-up (which lands on a file's first test that asks), for the
#: files over 15 s. Measured on 2026-11-30 on the idle 2-core EPYC (`pytest -n 2 --dist
#: loadfile -m "not bench" --durations=0 tests`); a file missing here or a time gone stale
#: only moves the file in the order.
SECONDS = {
    "tests/training/methods/test_llp_shard_bank.py": (76, 334),
    "tests/training/test_multi_worker.py": (0, 394),
    "tests/training/test_methods.py": (15, 182),
    "tests/training/test_crash_resume.py": (0, 123),
    "tests/training/test_assembly.py": (8, 113),
    "tests/training/methods/test_two_stream_runs.py": (1, 117),
    "tests/training/methods/test_mean_teacher.py": (12, 93),
    "tests/training/test_sliced_checkpoint.py": (38, 59),
    "tests/cli/test_compare_methods_tool.py": (3, 92),
    "tests/training/test_label_safety.py": (0, 77),
    "tests/data/pipeline/test_data_service.py": (57, 8),
    "tests/test_packaging.py": (0, 49),
    "tests/core/test_bank_slices.py": (2, 46),
    "tests/training/test_preemption.py": (8, 38),
    "tests/data/pipeline/test_input_fns.py": (27, 8),
    "tests/training/methods/test_pseudo_label.py": (14, 21),
    "tests/cli/test_train_tool.py": (12, 23),
    "tests/training/methods/test_fixmatch.py": (15, 11),
    "tests/test_layers.py": (24, 0),
    "tests/core/test_bank_contract.py": (17, 4),
    "tests/after_training/export/test_saved_model_cli.py": (0, 20),
    "tests/data/augmentation/test_views.py": (11, 5),
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
