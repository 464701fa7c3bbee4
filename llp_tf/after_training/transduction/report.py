"""The Table 5 comparison run and reported beside the paper's (`run_and_report`), and the
results file's dict (`results_json`)."""

import types
import warnings
from typing import Any, Mapping, TextIO

from llp_tf.after_training.transduction import protocol as protocol_lib
from llp_tf.counted_nouns import counted
from llp_tf.tensor_types import Array


def format_table(comparison: protocol_lib.Comparison) -> str:
    """One line per method: title, mean accuracy, std, the paper's Table 5 row (fractions)."""
    header = f"{'method':<32} {'accuracy':>8} {'std':>6}   paper Table 5"
    lines = [header, "-" * len(header)]
    for method in comparison.methods:
        paper = (f"{method.paper_accuracy:.3f} ({method.paper_name})"
                 if method.paper_accuracy is not None else "-")
        lines.append(f"{method.title:<32} {comparison.mean(method.name):>8.4f} "
                     f"{comparison.std(method.name):>6.4f}   {paper}")
    return "\n".join(lines)


def results_json(comparison: protocol_lib.Comparison, protocol: Mapping[str, Any],
                 settings: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """The results file's dict: every method's accuracies and the paper's protocol."""
    from llp_tf.after_training.transduction import methods
    return {
        "source": source,
        "protocol": protocol,
        "settings": settings,
        "methods": {
            m.name: {
                "title": m.title,
                "accuracy_mean": comparison.mean(m.name),
                "accuracy_std": comparison.std(m.name),
                "accuracy_per_draw": [float(a) for a in comparison.accuracy[m.name]],
                "seconds": comparison.seconds[m.name],
                "paper_table5": ({"name": m.paper_name, "accuracy": m.paper_accuracy}
                                 if m.paper_accuracy is not None else None),
            } for m in comparison.methods},
        "paper_table5_unmatched": methods.PAPER_TABLE5_UNMATCHED,
        "paper_protocol": {"classes": protocol_lib.PAPER_CLASSES,
                           "images_per_class": protocol_lib.PAPER_IMAGES_PER_CLASS,
                           "labelled_per_class": protocol_lib.PAPER_LABELLED_PER_CLASS,
                           "draws": protocol_lib.PAPER_DRAWS},
    }


def method_settings(methods: types.ModuleType, k: int, t: int,
                    temperature: float) -> dict[str, Any]:
    """Every method's settings, for the results file (``methods``: the module, imported late
    because it loads TensorFlow)."""
    from llp_tf.after_training.transduction import dlp_diffusion

    return {"k": int(k), "t": int(t), "temperature": float(temperature),
            "rbf_gamma": methods.rbf_gamma(temperature),
            "label_spreading": {"alpha": methods.LABEL_SPREADING_ALPHA,
                                "max_iter": methods.LABEL_SPREADING_MAX_ITER,
                                "tol": methods.SKLEARN_TOLERANCE},
            "label_propagation": {"max_iter": methods.LABEL_PROPAGATION_MAX_ITER,
                                  "tol": methods.SKLEARN_TOLERANCE},
            "dlp": {"k": dlp_diffusion.DLP_K, "gamma": dlp_diffusion.DLP_GAMMA,
                    "alpha": dlp_diffusion.DLP_ALPHA, "max_iter": dlp_diffusion.DLP_MAX_ITER,
                    "tol": dlp_diffusion.DLP_TOLERANCE}}


def run_and_report(features: Array, labels: Array, source: Mapping[str, Any], num_classes: int,
                   images: int, labelled: int, draws: int, seed: int, k: int, t: int,
                   temperature: float, stream: TextIO) -> protocol_lib.Comparison:
    """The `protocol.Comparison` of `methods.standard_methods` on ``features`` float [N, D]
    and true ``labels`` int64 [N], with progress, a note per method's warning and the table
    on ``stream``."""
    from llp_tf.after_training.transduction import methods

    stream.write(f"{len(labels)} embeddings of dimension {features.shape[1]} "
                 f"({source.get('embeddings', 'features file')}); {counted(draws, 'draw')} of "
                 f"{counted(num_classes, 'class')} x {counted(images, 'image')}, {labelled} "
                 f"labelled per class, {num_classes * (images - labelled)} scored per draw; "
                 f"K={k} T={t} tau={temperature:g}\n")
    stream.flush()

    def on_draw(number, total, accuracy, seconds):
        scores = " ".join(f"{name} {value:.4f}" for name, value in accuracy.items())
        stream.write(f"draw {number}/{total}: {scores} ({seconds:.1f} s)\n")
        stream.flush()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comparison = protocol_lib.compare_methods(
            features, labels, methods.standard_methods(k, t, temperature), num_classes, images,
            labelled, draws, seed, on_draw=on_draw)
    for message in sorted({str(w.message) for w in caught
                           if issubclass(w.category, (UserWarning, RuntimeWarning))}):
        stream.write(f"note: a method warned: {message}\n")

    stream.write("\n" + format_table(comparison) + "\n")
    stream.write(f"Accuracy on the unlabelled drawn images, mean and sample std over {draws} "
                 f"draws. The paper's numbers are for ImageNet ResNet-50 features with 50 "
                 f"classes x 50 images, 5 labelled (its LP_DMT, "
                 f"{methods.PAPER_TABLE5_UNMATCHED['LP_DMT']}, is not implemented here); compare "
                 f"the ranking, not the values.\n")
    return comparison
