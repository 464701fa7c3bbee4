"""The architecture page (docs/architecture.md): its module table matches the tree (every
module of llp_tf/ is named in it, and every path it names exists), and its example of adding
a method runs as written."""

import os
import re

from tests.cli.tool_main import ROOT


def _layout_rows():
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        text = f.read()
    section = text[text.index("## Modules"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    return [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]


def _named_paths():
    """Every path the table names: the first cell's paths (later ones relative to
    the first one's folder) and the modules the second cell names in its folder."""
    paths = []
    for first, second in _layout_rows():
        names = re.findall(r"`([^`]+)`", first)
        folder = names[0] if names[0].endswith("/") else os.path.dirname(names[0])
        paths.append(names[0])
        paths += [os.path.join(folder, name) for name in names[1:]]
        if names[0].endswith("/"):
            paths += [os.path.join(folder, name)
                      for name in re.findall(r"`([a-z_][a-z0-9_]*\.py)`", second)]
    return paths


def test_every_named_path_exists():
    missing = [path for path in _named_paths() if not os.path.exists(os.path.join(ROOT, path))]
    assert not missing, missing


def test_every_module_of_the_package_is_named():
    named = {os.path.normpath(path) for path in _named_paths()}
    unnamed = [os.path.relpath(os.path.join(folder, name), ROOT)
               for folder, _, files in os.walk(os.path.join(ROOT, "llp_tf"))
               for name in files if name.endswith(".py") and name != "__init__.py"]
    unnamed = [path for path in unnamed if path not in named]
    assert not unnamed, unnamed


def test_the_example_method_takes_a_step():
    """The page's example of adding a method ("The training step") runs as written: its
    step reports its declared metrics, and the confident rows' entropy is a subset mean."""
    import dataclasses

    import numpy as np
    import tensorflow as tf

    from llp_tf.config_fields import setting
    from llp_tf.core import losses
    from llp_tf.training import step_metrics
    from llp_tf.training.methods import base
    from tests.training.methods import two_streams

    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        page = f.read()
    start = page.index("```python\n", page.index("`llp_tf/training/methods/entropy.py`"))
    code = page[start + len("```python\n"):page.index("```\n", start + 10)]
    namespace = {"dataclasses": dataclasses, "tf": tf, "setting": setting, "losses": losses,
                 **{name: getattr(base, name) for name in (
                     "Method", "StepOutput", "PhaseStep", "InputSpec", "Stream", "split_batch")},
                 **{name: getattr(step_metrics, name) for name in (
                     "StepMetrics", "Mean", "SubsetMean", "batch_mean", "subset_mean",
                     "replica_value")}}
    exec(compile(code, "docs/architecture.md", "exec"), namespace)
    strategy = tf.distribute.get_strategy()
    model, optimizer = two_streams.tiny_model(strategy)
    method = namespace["EntropyMethod"](strategy, model, optimizer,
                                        settings=namespace["EntropySettings"](),
                                        num_classes=two_streams.C, global_batch_size=8,
                                        weight_decay=1e-4)
    method.labelled_batch_size = method.labelled_batch
    method.unlabelled_batch_size = method.unlabelled_batch
    records = base.StepRunner(method).run(
        two_streams.iterator(method, two_streams.streams()), 2, "entropy")
    assert list(records.values) == ["loss", "labelled", "entropy", "confident_entropy",
                                    "weight_decay"]
    assert list(records.weights) == ["confident_entropy"]
    # Entropy over C classes lies in [0, log C].
    assert np.all((records.values["entropy"] >= 0)
                  & (records.values["entropy"] <= np.log(two_streams.C) + 1e-6))
    assert np.all(np.isfinite(records.values["loss"]))
