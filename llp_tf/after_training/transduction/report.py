"""The comparison's report: its table beside the paper's Table 5 (`format_table`),
every method's settings (`method_settings`) and the results file's dict
(`results_json`)."""

from llp_tf.after_training.transduction import protocol as protocol_lib


def format_table(comparison):
    """str: one line per method: title, mean accuracy, std, the paper's Table 5
    row (fractions, as every accuracy: llp_tf.training.metrics)."""
    header = f"{'method':<32} {'accuracy':>8} {'std':>6}   paper Table 5"
    lines = [header, "-" * len(header)]
    for method in comparison.methods:
        paper = (f"{method.paper_accuracy:.3f} ({method.paper_name})"
                 if method.paper_accuracy is not None else "-")
        lines.append(f"{method.title:<32} {comparison.mean(method.name):>8.4f} "
                     f"{comparison.std(method.name):>6.4f}   {paper}")
    return "\n".join(lines)


def results_json(comparison, protocol, settings, source):
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


def method_settings(methods, k, t, temperature):
    """dict: every method's settings, for the results file (``methods``: the
    `transduction.methods` module, imported late because it loads TensorFlow)."""
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
