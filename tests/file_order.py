"""The order in which pytest-xdist hands test files to its workers: longest first.

`make test` and `make test-all` give each worker whole files (``--dist loadfile``) in
collection order (``--no-loadscope-reorder``). A file of a few long tests handed out last
runs alone while the other worker idles, so `longest_first` puts the files measured longest
first (the longest-processing-time rule: the run ends within 4/3 of the best split).
"""

#: Seconds of a file's tests that `make test` runs and of those marked slow, summed over the
#: tests with their fixtures' set-up, for the files over 15 s. Measured on 2026-11-30 on the
#: 2-core EPYC with a training run in the background (`pytest --durations=0`); a file missing
#: here or a time gone stale only moves the file in the order.
SECONDS = {
    "tests/training/test_multi_worker.py": (0, 489),
    "tests/training/methods/test_llp_shard_bank.py": (3, 463),
    "tests/training/methods/test_two_stream_runs.py": (10, 174),
    "tests/training/test_methods.py": (18, 161),
    "tests/training/test_assembly.py": (1, 167),
    "tests/training/methods/test_mean_teacher.py": (15, 113),
    "tests/cli/test_compare_methods_tool.py": (3, 95),
    "tests/training/test_crash_resume.py": (0, 95),
    "tests/training/test_sliced_checkpoint.py": (8, 84),
    "tests/training/test_label_safety.py": (0, 74),
    "tests/cli/test_train_tool.py": (16, 55),
    "tests/training/methods/test_pseudo_label.py": (15, 43),
    "tests/test_packaging.py": (0, 52),
    "tests/training/test_preemption.py": (11, 41),
    "tests/data/pipeline/test_input_fns.py": (32, 11),
    "tests/training/methods/test_fixmatch.py": (27, 13),
    "tests/core/test_bank_slices.py": (1, 35),
    "tests/core/test_bank_contract.py": (20, 12),
    "tests/data/pipeline/test_data_service.py": (16, 8),
    "tests/models/test_precision.py": (13, 11),
    "tests/data/augmentation/test_views.py": (15, 6),
    "tests/after_training/export/test_saved_model_cli.py": (1, 20),
    "tests/after_training/test_stored_bank.py": (0, 18),
    "tests/cli/test_input_service.py": (0, 18),
    "tests/data/pipeline/test_streams.py": (12, 5),
    "tests/cli/test_quiet_start.py": (12, 5),
    "tests/after_training/test_run_loader.py": (1, 14),
}


def longest_first(items):
    """Reorders ``items`` (pytest's selected items) in place: whole files, longest first
    by `SECONDS` (a file's slow part counts when one of its slow tests is selected); files
    not listed keep their order after those listed."""
    slow = {item.nodeid.split("::")[0] for item in items
            if item.get_closest_marker("slow") is not None}

    def seconds(path):
        fast, slow_part = SECONDS.get(path, (0.0, 0.0))
        return fast + (slow_part if path in slow else 0.0)

    first = {}
    for item in items:
        first.setdefault(item.nodeid.split("::")[0], len(first))
    items.sort(key=lambda item: (-seconds(path := item.nodeid.split("::")[0]), first[path]))
