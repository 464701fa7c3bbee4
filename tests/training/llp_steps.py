"""Two code paths of LLP (replicas, XLA, a sharded bank, workers) compared from
the same state one step at a time, per term: each metric, the weight moves and
the bank's writes, to `tests.numerics`' bounds; the density refresh likewise.

The functions take the bank's state as numpy arrays by name (`BANK_STATE`), so
that runs compared through their checkpoints use them too; `LLPComparison`
drives two methods in one process."""

import dataclasses

import numpy as np

from llp_tf.core.sharded_bank import ShardedMemoryBank

from tests import numerics
from tests.same_state import first_copy, logit_scale, model_weights, replica_copies

BANK_STATE = ("embeddings", "labels", "confidence", "density")


@dataclasses.dataclass(frozen=True)
class LLPSizes:
    """What the bounds read of an LLP method: N bank rows of D, C classes,
    tau, the bank's momentum m, K voters, T density neighbours, the decayed
    weights' count and the labelled rows."""

    rows: int
    dim: int
    classes: int
    temperature: float
    momentum: float
    k: int
    t: int
    decayed_weights: int
    labelled_index: np.ndarray

    @classmethod
    def of(cls, method):
        return cls(method.bank.num_examples, method.bank.dim, method.num_classes,
                   method.temperature, method.bank.momentum, method.k, method.t,
                   sum(int(np.prod(w.shape)) for w in method.model.weight_decay_variables()),
                   first_copy(method.bank.labelled_index))


def bank_state(method):
    """The bank's state (replica 0's copy, or the sharded bank's whole view), by name."""
    return {name: first_copy(getattr(method.bank, name)) for name in BANK_STATE}


def assert_replicas_hold_one_state(method):
    """Every replica's copy of the model's weights and (replicated) bank is the same."""
    variables = list(method.model.weights)
    if not isinstance(method.bank, ShardedMemoryBank):
        variables += [getattr(method.bank, name) for name in BANK_STATE]
    for variable in variables:
        copies = replica_copies(variable)
        for copy in copies[1:]:
            np.testing.assert_array_equal(copy, copies[0], err_msg=variable.name)


def score_bounds(sizes, rows, rtol):
    """(scale, relative error) of scores e.b / tau against bank ``rows``: the
    embedding e (|e| = 1) carries the network's error ``rtol``, the D-term dot
    product its own rounding (2 (D - 1) u |e| |b|)."""
    scale = np.max(np.linalg.norm(np.asarray(rows, np.float64), axis=1)) / sizes.temperature
    return scale, rtol + numerics.reordered_sum_bound(sizes.dim, 1.0)


def assert_same_density(sizes, rows, want, got):
    """Densities refreshed from the same bank ``rows``: log rho within the
    rounding of its scores q.b / tau (D-term dot products of rows of norm at
    most R: 2 (D - 1) u R^2 / tau) and of its T-term log-sum-exp. Returns that
    bound."""
    norm = np.max(np.linalg.norm(np.asarray(rows, np.float64), axis=1))
    bound = (numerics.reordered_sum_bound(sizes.dim, norm ** 2) / sizes.temperature
             + numerics.reordered_sum_bound(sizes.t, 1.0))
    want, got = (np.log(np.asarray(d, np.float64)) for d in (want, got))
    assert np.all(want > 1.0), "the densities were not refreshed"
    np.testing.assert_allclose(got, want, rtol=0, atol=bound, err_msg="log density")
    return bound


def metric_bounds(sizes, want, before, rtol, logits, batch):
    """Per metric of a step (`numerics.metric_bound`) from the bank state
    ``before`` it: the aggregation loss a softmax of bank scores over N rows,
    the categorisation loss one of C logits (of size at most ``logits``), the
    loss their confidence-weighted sum plus the weight decay; the weight decay
    a sum of squares over the decayed weights (the same weights); confidences
    and counts read from the same bank: ``pseudo_labelled`` a mean of such,
    ``confidence`` (a ratio of two) when reported."""
    scale, score_rtol = score_bounds(sizes, before["embeddings"], rtol)
    aggregation = numerics.softmax_term_bound(score_rtol, scale, sizes.rows)
    categorisation = numerics.softmax_term_bound(rtol, logits, sizes.classes)
    decay = numerics.metric_bound(want["weight_decay"], sizes.decayed_weights)
    bounds = {"weight_decay": decay,
              "aggregation": numerics.metric_bound(want["aggregation"], batch, aggregation)}
    terms = aggregation
    if "categorisation" in want:
        bounds["categorisation"] = numerics.metric_bound(want["categorisation"], batch,
                                                         categorisation)
        terms += categorisation
        bounds["pseudo_labelled"] = numerics.metric_bound(want["pseudo_labelled"], batch)
        if "confidence" in want:
            bounds["confidence"] = 2 * numerics.metric_bound(want["confidence"], batch)
    bounds["loss"] = decay + numerics.metric_bound(want["loss"], batch, terms)
    return bounds


def assert_same_writes(sizes, before, want, got, index, rtol, llp=True, offset_error=0.0):
    """The bank after a step on the rows ``index`` from the state ``before``:
    labels equal (pseudo classes: a vote's argmax), rows outside the batch
    untouched (equal), the batch's rows within `numerics.unit_row_write_bound`,
    their confidences (``llp``) within the relative move of a K-term softmax
    ratio of scores against the labelled rows (less their log densities, apart
    by up to ``offset_error`` if the two paths refreshed them), the densities
    as they were."""
    np.testing.assert_array_equal(got["labels"], want["labels"], err_msg="labels")
    np.testing.assert_array_equal(got["density"], want["density"], err_msg="density")
    np.testing.assert_array_equal(want["density"], before["density"], err_msg="density")
    written = np.zeros(len(before["labels"]), bool)
    written[index] = True
    for name in ("embeddings", "confidence"):
        np.testing.assert_array_equal(got[name][~written], want[name][~written],
                                      err_msg=f"{name} of rows outside the batch")
        np.testing.assert_array_equal(want[name][~written], before[name][~written],
                                      err_msg=f"{name} of rows outside the batch")
    bound = numerics.unit_row_write_bound(before["embeddings"][written],
                                          want["embeddings"][written], sizes.momentum, rtol)
    apart = np.linalg.norm(got["embeddings"][written].astype(np.float64)
                           - want["embeddings"][written], axis=1)
    assert np.all(apart <= np.minimum(bound, 2.0)), (
        f"bank rows written apart by up to {apart.max():.3g}, bounds from {bound.min():.3g}")
    assert not np.array_equal(want["embeddings"][written], before["embeddings"][written])
    if not llp:
        np.testing.assert_array_equal(got["confidence"], before["confidence"])
        return
    scale, score_rtol = score_bounds(sizes, before["embeddings"][sizes.labelled_index], rtol)
    # The densities' offsets, the same in both, add one rounding of the scores' size.
    offsets = np.max(np.abs(np.log(before["density"].astype(np.float64))))
    score_rtol += numerics.U * (1 + offsets / scale) + offset_error / scale
    ratio = numerics.softmax_term_bound(score_rtol, scale, sizes.k)
    np.testing.assert_allclose(got["confidence"][written], want["confidence"][written],
                               rtol=np.expm1(ratio), atol=0, err_msg="confidence")


class LLPComparison:
    """Compares LLP steps of ``other`` with ``reference``'s from the same state.

    Args:
      reference, other: `tests.same_state.Path`s of two `LLPMethod`s of the same settings.
      copier: a `tests.same_state.StateCopier`.
      sums: terms of each of the network's chained sums (`numerics.tiny_resnet_sums`).
      logits_model: a model whose forward pass gives the step's logits (the
        reference's when None); ``logits_replicas`` the number of shares its
        unsynchronised batch norms normalise apart.
      input_rtol: the relative difference of the two paths' input images, if any
        (it passes into the network with unit gain, as its sums' errors do).
    """

    def __init__(self, reference, other, copier, sums, logits_model=None,
                 logits_replicas=1, input_rtol=0.0):
        self.reference, self.other, self.copier = reference, other, copier
        self.rtol = numerics.network_rtol(sums) + input_rtol
        self.move_rtol = numerics.step_rtol(sums) + 2 * input_rtol
        self.logits_model = logits_model
        self.logits_replicas = logits_replicas
        self.sizes = LLPSizes.of(reference.method)

    @property
    def methods(self):
        return self.reference.method, self.other.method

    def refresh(self, epoch=1):
        """The density refresh of both from the reference's bank (`assert_same_density`)."""
        want_method, got_method = self.methods
        self.copier.copy(want_method, got_method)
        for method in self.methods:
            method.before_epoch(epoch, "llp")
            assert int(method.density_epoch.numpy()) == epoch
        assert_same_density(self.sizes, first_copy(want_method.bank.embeddings),
                            *(first_copy(m.bank.density) for m in self.methods))
        for method in self.methods:
            assert_replicas_hold_one_state(method)

    def step(self, phase, batch, copy=True):
        """One step of ``phase`` of both from the reference's state (copied into
        the other's, unless ``copy`` is False: the test made them equal), on the
        global ``batch`` (numpy "image" [B, ...] and "index" [B], in the
        iterators' order); returns (reference's metrics, other's)."""
        want_method, got_method = self.methods
        if copy:
            self.copier.copy(want_method, got_method)
        start, before = model_weights(want_method.model), bank_state(want_method)
        logits = (logit_scale(self.logits_model or want_method.model, batch["image"],
                              self.logits_replicas) if phase == "llp" else 0.0)
        want, got = self.reference.step(phase), self.other.step(phase)
        numerics.assert_same_metrics(want, got, metric_bounds(
            self.sizes, want, before, self.rtol, logits, len(batch["index"])))
        for method in self.methods:
            assert_replicas_hold_one_state(method)
        numerics.assert_same_step_moves(start, model_weights(want_method.model),
                                        model_weights(got_method.model), self.move_rtol)
        assert_same_writes(self.sizes, before, bank_state(want_method), bank_state(got_method),
                           batch["index"], self.rtol, llp=phase == "llp")
        return want, got
