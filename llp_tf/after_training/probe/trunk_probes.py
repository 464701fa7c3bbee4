"""A run's trunk probed (`probe_trunks`), with a random one of its architecture for
contrast, the summary table (`format_table`) and the results file's dict (`results`)."""

import dataclasses
import hashlib
import json
import os
import re
from typing import Any, Mapping, Sequence, TextIO

from llp_tf.after_training.probe import feature_cache, linear_probe
from llp_tf.after_training.probe.readout import ProbeResult, ProbeSettings
from llp_tf.after_training.run_loader import TrainedRun
from llp_tf.data.sources.base import Source, SourceInfo


def dataset_slug(name: str) -> str:
    """A file-name part for a dataset name: "tfds:places365_small" ->
    "tfds_places365_small", "folder:/data/scenes/" -> "folder_scenes"."""
    kind, _, rest = name.partition(":")
    if rest:
        name = f"{kind}_{os.path.basename(os.path.normpath(rest))}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "dataset"


def cache_folder_name(info: SourceInfo) -> str:
    """The folder of a dataset's feature caches: its `dataset_slug` and a hash of its whole
    `feature_cache.dataset_identity`, so datasets in folders of one name keep apart."""
    identity = json.dumps(feature_cache.dataset_identity(info), sort_keys=True)
    return f"{dataset_slug(info.name)}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def format_table(rows: Sequence[tuple[str, ProbeResult]]) -> str:
    """The summary table of (trunk name, ProbeResult) rows; accuracies are fractions."""
    header = (f"{'trunk':<8} {'val_top1':>8} {'val_top5':>8} {'best_val_top1':>13} "
              f"{'at epoch':>8} {'epochs':>6} {'drops':>5} {'train s':>7}")
    lines = [header]
    for name, result in rows:
        lines.append(f"{name:<8} {result.val_top1:8.4f} {result.val_top5:8.4f} "
                     f"{result.best_val_top1:13.4f} {result.best_epoch:8d} "
                     f"{result.epochs:6d} {result.drops:5d} {result.seconds:7.1f}")
    return "\n".join(lines)


PROTOCOL_DESCRIPTIONS = {
    "cached": "frozen trunk; pooled features of one centre crop per image, computed once "
              "into a disk cache; linear softmax readout trained on them with SGD and "
              "plateau drops",
    "online": "frozen trunk (batch norm in inference mode); linear softmax readout trained "
              "with SGD and plateau drops on the pooled features of augmented training "
              "images, computed at every step; validation on one centre crop",
}


def probe_trunks(run: TrainedRun, source: Source, settings: ProbeSettings,
                 cache_dir: str | None, stream: TextIO | None, skip_random: bool = False,
                 seed: int = 0, reuse_cache: bool = True
                 ) -> tuple[dict[str, dict[str, Any]], list[tuple[str, ProbeResult]],
                            dict[str, Any]]:
    """(results by trunk name, `format_table` rows, facts of the last probe) of ``run``'s
    trunk and, unless ``skip_random``, a random one seeded by ``seed``
    (`linear_probe.probe_trunk`)."""
    trunks = [("trained", run.model)]
    if not skip_random:
        trunks.append(("random", None))
    results, rows, facts = {}, [], {}
    for name, model in trunks:
        if model is None:
            model = linear_probe.random_trunk_model(run.config, run.num_classes, seed)
        trunk = "trained" if name == "trained" else f"random-seed{seed}"
        description = (f"checkpoint {run.checkpoint}" if name == "trained" else
                       f"random {run.config.model.architecture} trunk, seed {seed}")
        result, facts = linear_probe.probe_trunk(
            model, source, run.config.data.image_size, settings, cache_dir=cache_dir,
            trunk=trunk, trunk_description=description, reuse_cache=reuse_cache,
            augmentation=run.config.data.augmentation,
            min_crop_area=run.config.data.min_crop_area, stream=stream,
            description=f"{name} trunk readout")
        results[name] = dict(result.to_json(), extraction_seconds=facts["extraction_seconds"],
                             cache=facts["cache"], cache_reused=facts["cache_reused"])
        rows.append((name, result))
    return results, rows, facts


def results(run_dir: str, run: TrainedRun, info: SourceInfo, settings: ProbeSettings,
            cache_dir: str | None, results_by_trunk: Mapping[str, Mapping[str, Any]],
            facts: Mapping[str, Any]) -> dict[str, Any]:
    """The results file's dict of a probe of ``run`` on the dataset of ``info``."""
    return {
        "run_dir": os.path.abspath(run_dir), "checkpoint": run.checkpoint,
        "step": run.step, "method": run.config.method.name, "dataset": info.name,
        "num_classes": info.num_classes, "image_size": run.config.data.image_size,
        "feature_dim": facts["feature_dim"], "num_train": facts["num_train"],
        "num_validation": facts["num_validation"], "protocol": settings.protocol,
        "protocol_description": PROTOCOL_DESCRIPTIONS[settings.protocol],
        "cache_dir": cache_dir, "max_train_examples": settings.max_train_examples,
        "settings": dataclasses.asdict(settings),
        "trained": results_by_trunk["trained"], "random": results_by_trunk.get("random"),
    }
