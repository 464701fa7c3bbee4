"""The Table 5 comparison run over a sweep of labelled images per class and reported beside
the paper's (`run_and_report`): each level's accuracies, LLP's paired differences and the
paper's two claims (`table5_claims`); and the results file's dict (`results_json`)."""

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from llp_tf.after_training.transduction import method_settings as settings_lib
from llp_tf.after_training.transduction import paired_differences, table5_claims
from llp_tf.after_training.transduction import protocol as protocol_lib
from llp_tf.counted_nouns import counted
from llp_tf.tensor_types import Array

#: How the table and results file label a method without a Table 5 row (the weighted kNN).
NOT_IN_TABLE5 = "not in Table 5"
#: Column names of the differences table, the paper's names where it has them.
SHORT_NAMES = {"local_knn": "LLP", "knn": "kNN", "label_spreading": "LS",
               "label_propagation": "LP", "lp_dmt": "LP_DMT", "dlp": "DLP"}


def short_name(name: str) -> str:
    """A method's column name (its results key when it has none)."""
    return SHORT_NAMES.get(name, name)


def _points(value: float) -> str:
    return f"{100 * value:+.2f}"


def _interval_text(interval: tuple[float, float]) -> str:
    """"[-0.62, +0.41]" in accuracy points."""
    return f"[{_points(interval[0])}, {_points(interval[1])}]"


def level_title(level: int, headline: int, scored: int) -> str:
    """"5 labelled per class (the paper's protocol), 450 scored per draw"."""
    if level == protocol_lib.PAPER_LABELLED_PER_CLASS:
        mark = " (the paper's protocol)"
    elif level == headline:
        mark = " (the claims' level)"
    else:
        mark = ""
    return f"{level} labelled per class{mark}, {scored} scored per draw"


def format_table(comparison: protocol_lib.Comparison) -> str:
    """One line per method: title, mean accuracy, std, the paper's Table 5 row (fractions) or
    "not in Table 5"."""
    header = f"{'method':<38} {'accuracy':>8} {'std':>6}   paper Table 5"
    lines = [header, "-" * len(header)]
    for method in comparison.methods:
        paper = (f"{method.paper_accuracy:.3f} ({method.paper_name})"
                 if method.paper_accuracy is not None else NOT_IN_TABLE5)
        lines.append(f"{method.title:<38} {comparison.mean(method.name):>8.4f} "
                     f"{comparison.std(method.name):>6.4f}   {paper}")
    return "\n".join(lines)


def format_differences(differences: Sequence[paired_differences.PairedDifference]) -> str:
    """LLP minus each method: a row per draw (fractions), then mean, std, the 95% interval (in
    accuracy points) and draws won/tied/lost."""
    width, label = 17, 14

    def row(name, cells):
        return f"{name:<{label}}" + "".join(f"{cell:>{width}}" for cell in cells)

    lines = [row("LLP minus", [short_name(d.name) for d in differences])]
    draws = len(differences[0].per_draw) if differences else 0
    for number in range(draws):
        lines.append(row(f"draw {number + 1}", [f"{d.per_draw[number]:+.4f}"
                                                for d in differences]))
    lines.append(row("mean", [f"{d.mean:+.4f}" for d in differences]))
    lines.append(row("std", [f"{d.std:.4f}" for d in differences]))
    if draws > 1:
        lines.append(row("95% CI, points", [
            _interval_text(d.interval(paired_differences.REPORTED_CONFIDENCE))
            for d in differences]))
    lines.append(row("won/tied/lost", [f"{d.won}/{d.tied}/{d.lost}" for d in differences]))
    return "\n".join(lines)


def format_finding(finding: table5_claims.Finding) -> str:
    """One claim: the paper's words, the answer, the mean and 90% interval against the range,
    the draws won."""
    d, claim = finding.difference, finding.claim
    answer = finding.answer.value
    if d.draws < 2:
        detail = "one draw decides nothing"
    else:
        detail = (f"LLP - {claim.paper_name} = {_points(d.mean)} points, 90% CI "
                  f"{_interval_text(finding.interval)} against {claim.range_text()}")
    return (f"LLP {claim.name} (\"{claim.words}\"): {answer.upper()}: {detail}; won "
            f"{d.won} of {d.draws}")


def format_claims(findings: Sequence[table5_claims.Finding]) -> str:
    """A line per claim tested, or why none was."""
    if not findings:
        return "No claim tested: neither LP_DMT nor DLP was compared."
    return "\n".join(format_finding(f) for f in findings)


def format_sweep(sweep: Mapping[int, protocol_lib.Comparison]) -> str:
    """Mean accuracy of each method at each level, then LLP's mean difference with its 95%
    interval (points) and draws won, and each claim's answer."""
    levels = sorted(sweep)
    width = 30
    first = sweep[levels[0]]
    lines = [f"{'labelled per class':<24}" + "".join(f"{level:>{width}}" for level in levels)]
    for method in first.methods:
        lines.append(f"{short_name(method.name):<24}" + "".join(
            f"{sweep[level].mean(method.name):>{width}.4f}" for level in levels))
    differences = {level: paired_differences.llp_minus(sweep[level]) for level in levels}
    for position, d in enumerate(differences[levels[0]]):
        cells = []
        for level in levels:
            e = differences[level][position]
            interval = (_interval_text(e.interval(paired_differences.REPORTED_CONFIDENCE))
                        if e.draws > 1 else "")
            cells.append(f"{_points(e.mean)} {interval} {e.won}/{e.draws}")
        lines.append(f"{'LLP - ' + short_name(d.name):<24}" + "".join(
            f"{cell:>{width}}" for cell in cells))
    findings = {level: table5_claims.decide_claims(differences[level]) for level in levels}
    for position, finding in enumerate(findings[levels[0]]):
        lines.append(f"{finding.claim.name:<24}" + "".join(
            f"{findings[level][position].answer.value:>{width}}" for level in levels))
    return "\n".join(lines)


def level_json(comparison: protocol_lib.Comparison) -> dict[str, Any]:
    """One level's ``methods``, ``differences`` and ``claims``."""
    differences = paired_differences.llp_minus(comparison)
    return {
        "methods": {
            m.name: {
                "title": m.title,
                "accuracy_mean": comparison.mean(m.name),
                "accuracy_std": comparison.std(m.name),
                "accuracy_per_draw": [float(a) for a in comparison.accuracy[m.name]],
                "seconds": comparison.seconds[m.name],
                "in_paper_table5": m.paper_accuracy is not None,
                "paper_table5": ({"name": m.paper_name, "accuracy": m.paper_accuracy}
                                 if m.paper_accuracy is not None else NOT_IN_TABLE5),
            } for m in comparison.methods},
        "differences": {d.name: d.as_json() for d in differences},
        "claims": {f.claim.name: f.as_json()
                   for f in table5_claims.decide_claims(differences)},
    }


def results_json(sweep: Mapping[int, protocol_lib.Comparison], headline: int,
                 protocol: Mapping[str, Any], settings: settings_lib.MethodSettings,
                 source: Mapping[str, Any]) -> dict[str, Any]:
    """The results file's dict: the claims' level (``headline``) at the top, every level
    under ``sweep`` (keyed by the level as a string), the hyperparameter rule and values, and
    how the claims are decided."""
    levels = {str(level): level_json(sweep[level]) for level in sorted(sweep)}
    return {
        "source": source,
        "protocol": protocol,
        "hyperparameter_rule": settings.as_json(),
        "labelled_per_class": headline,
        **levels[str(headline)],
        "sweep": levels,
        "claims_rule": table5_claims.rule_json(),
        "paper_protocol": {"classes": protocol_lib.PAPER_CLASSES,
                           "images_per_class": protocol_lib.PAPER_IMAGES_PER_CLASS,
                           "labelled_per_class": protocol_lib.PAPER_LABELLED_PER_CLASS,
                           "draws": protocol_lib.PAPER_DRAWS},
    }


def vacuous_draw_line(available: int, num_classes: int, images: int) -> str:
    """The note that every draw has the same classes: ``available`` classes have ``images``
    images or more and a draw takes ``num_classes``."""
    return (f"note: {counted(available, 'class')} {'has' if available == 1 else 'have'} "
            f"{images} images or more and each draw takes {num_classes}: the class draw is "
            f"vacuous (every draw has the same classes; only the images are drawn).\n")


def run_and_report(features: Array, labels: Array, source: Mapping[str, Any], num_classes: int,
                   images: int, levels: Sequence[int], headline: int, draws: int, seed: int,
                   settings: settings_lib.MethodSettings,
                   stream: TextIO) -> dict[int, protocol_lib.Comparison]:
    """Labelled per class -> `protocol.Comparison` of `methods.standard_methods` (with
    ``settings``' values) at each of ``levels`` on ``features`` float [N, D] with true
    ``labels`` int64 [N]; writes progress, a note per method's warning, each level's table,
    differences and claims, the sweep and ``headline``'s claims to ``stream``."""
    from llp_tf.after_training.transduction import methods

    levels = sorted(set(levels) | {headline})
    stream.write(f"{len(labels)} embeddings of dimension {features.shape[1]} "
                 f"({source.get('embeddings', 'features file')}); {counted(draws, 'draw')} of "
                 f"{counted(num_classes, 'class')} x {counted(images, 'image')}, labelled per "
                 f"class: {', '.join(str(level) for level in levels)} (the same draws at each)\n")
    if protocol_lib.class_draw_is_vacuous(labels, num_classes, images):
        stream.write(vacuous_draw_line(protocol_lib.eligible_classes(labels, images),
                                       num_classes, images))
    stream.write(settings.summary() + "\n")
    stream.flush()

    def on_draw(level):
        def report(number, total, accuracy, seconds):
            scores = " ".join(f"{short_name(name)} {value:.4f}"
                              for name, value in accuracy.items())
            stream.write(f"{level} labelled, draw {number}/{total}: {scores} "
                         f"({seconds:.1f} s)\n")
            stream.flush()
        return report

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sweep = protocol_lib.compare_sweep(
            features, labels, methods.standard_methods(**settings.values()), num_classes,
            images, levels, draws, seed, on_draw=on_draw)
    for message in sorted({str(w.message) for w in caught
                           if issubclass(w.category, (UserWarning, RuntimeWarning))}):
        stream.write(f"note: a method warned: {message}\n")

    write_levels(sweep, levels, headline, num_classes, images, draws, stream)
    return sweep


def write_levels(sweep: Mapping[int, protocol_lib.Comparison], levels: Sequence[int],
                 headline: int, num_classes: int, images: int, draws: int,
                 stream: TextIO) -> None:
    """Writes each level's table, LLP's differences and claims, the sweep, how the claims are
    decided and ``headline``'s claims to ``stream``."""
    for level in levels:
        comparison = sweep[level]
        differences = paired_differences.llp_minus(comparison)
        stream.write(f"\n== {level_title(level, headline, num_classes * (images - level))} ==\n")
        stream.write(format_table(comparison) + "\n\n")
        stream.write(format_differences(differences) + "\n")
        stream.write(format_claims(table5_claims.decide_claims(differences)) + "\n")
    if len(levels) > 1:
        stream.write(f"\n== sweep: mean accuracy, and LLP minus each method (mean and 95% CI "
                     f"in points, draws won of {draws}) ==\n{format_sweep(sweep)}\n")
    stream.write(
        f"\nAccuracies are fractions of the unlabelled drawn images; std is the sample std over "
        f"{counted(draws, 'draw')}; intervals are Student-t over the paired draws. Beside its "
        f"Table 5, the paper claims LLP \"comparable\" to LP_DMT, tested as equivalence within "
        f"+-{100 * table5_claims.COMPARABLE_MARGIN:g} point, and \"only slightly lower\" than "
        f"DLP, tested as a gap in (0, {100 * table5_claims.SLIGHT_GAP:g}) points; each by two "
        f"one-sided paired t-tests at {table5_claims.ALPHA:g} (the 90% interval inside the "
        f"range holds, outside it does not, else not resolved). It claims nothing about LS "
        f"or LP. The paper's numbers are for ImageNet ResNet-50 features, 50 classes x 50 "
        f"images, 5 labelled.\n")
    findings = table5_claims.decide_claims(paired_differences.llp_minus(sweep[headline]))
    stream.write(f"At {headline} labelled per class:\n{format_claims(findings)}\n")
