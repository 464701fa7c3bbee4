"""Labelled exposure: passes over each labelled image with its label, over a run. It reads a
finished run's settings (its config.json) and counts; it imports TensorFlow only to read a
setting that config.json leaves to its ``baseline_preset`` (None there).

exposure = (labelled images a step whose label enters the loss) x (steps that read labels)
/ M, over a run of S steps on N used images, M of them labelled, global batch G:

- supervised: its one stream is the labelled set, G images a step, every step: S G / M;
- pseudo_label, mean_teacher, fixmatch: a labelled stream of B = G // (1 + r) images a step
  (r their ``unlabelled_ratio``), every step: S B / M (their unlabelled stream holds the
  labelled images too, whose labels it never reads);
- llp: one stream of all N used images, a permutation each epoch, so a step holds G M / N
  labelled images in expectation; only the LLP steps read labels (the warm start's
  ``warmup_epochs`` x floor(N / G) steps treat every image as its own instance): (S - S_w) G /
  N, whatever M is."""

from collections.abc import Mapping
from typing import Any

from llp_tf.training.methods import method_class


def labelled_per_step(method: str, settings: Mapping[str, Any], global_batch_size: int,
                      num_labelled: int, num_used: int) -> float:
    """Labelled images a step of ``method`` (with its ``settings``, config.json's
    ``methods[method]``) reads with their label, in expectation."""
    if method == "supervised":
        return float(global_batch_size)
    if method == "llp":
        return global_batch_size * num_labelled / num_used
    if "unlabelled_ratio" in settings:  # a labelled and an unlabelled stream
        return float(global_batch_size // (1 + int(settings["unlabelled_ratio"])))
    raise ValueError(f"No labelled-exposure rule for the method {method!r}.")


def labelled_steps(method: str, settings: Mapping[str, Any], steps: int,
                   steps_per_epoch: int) -> int:
    """The steps of a run of ``steps`` that read labels: LLP's after its warm start, every
    step of the others."""
    if method == "llp":
        return max(0, steps - int(settings["warmup_epochs"]) * steps_per_epoch)
    return steps


def exposure(config: Mapping[str, Any], steps: int, num_labelled: int, num_used: int) -> float:
    """Passes over each labelled image with its label in ``steps`` steps of the run whose
    config.json is ``config``, on its split of ``num_labelled`` labelled of ``num_used`` used
    images."""
    method = config["method"]["name"]
    settings = config["methods"][method]
    if "unlabelled_ratio" in settings and settings["unlabelled_ratio"] is None:  # preset's
        resolved = method_class(method).Settings(**settings).resolved(
            config["method"]["baseline_preset"])
        settings = {**settings, "unlabelled_ratio": resolved["unlabelled_ratio"]}
    batch = int(config["optimization"]["global_batch_size"])
    per_step = labelled_per_step(method, settings, batch, num_labelled, num_used)
    reading = labelled_steps(method, settings, steps, num_used // batch)
    return per_step * reading / num_labelled
