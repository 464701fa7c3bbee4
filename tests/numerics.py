"""How far two float32 computations of the same training step may differ.

Tests compare two code paths of a step (one replica against two, XLA against
TensorFlow's kernels, a sharded bank against a replicated one, workers
against replicas) from the same state, one step at a time: a tiny network's
trajectory is chaotic (a change of 1e-7 in a weight flips a ReLU and moves
the next gradient by about 1%), so runs several steps apart agree only as
far as one CPU's rounding happens to allow. From the same state, the two
paths compute the same products and differ in the order of their float32
sums only. The bounds follow from that, with u = 2^-24 (float32's unit
roundoff):

- a sum of n terms, in any order, lies within (n - 1) u sum|terms| of the
  exact sum (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
  ed., eq. 4.4); two orders within twice that (`reordered_sum_bound`);
- an output of the network (an embedding, a logit) comes out of a chain of
  sums (`tiny_resnet_sums`: a batch norm's moments over batch x height x
  width terms, a convolution's over 3 x 3 x channels, ...). Each moves it by
  at most 2 (n - 1) u relative to the size of its terms, taken as the size
  of its result (batch-normalised activations and He-initialised weights,
  whose sums do not cancel to far below their terms), and errors from
  earlier sums pass on with unit gain to first order: `network_rtol` is the
  chain's sum of 2 (n_i - 1) u;
- a step's weight moves (lr x the gradient, weight decay and momentum buffer
  equal in both paths) chain the backward pass's as many sums:
  `step_rtol` = 2 `network_rtol`, in norm over all weights, each variable
  held to the whole move's scale (a gradient that cancels has no scale of
  its own);
- a loss term is a log-softmax, or a ratio of softmax sums, of inputs of
  size at most S (bank scores e.b / tau: S = max|b| / tau; logits: S =
  max|z|) that carry the network's relative error: it moves by at most
  2 rtol S, plus its own sums' reordering (`softmax_term_bound`); a metric is
  the global batch's mean of such non-negative terms, summed in another
  order (`metric_bound`).

A real fault (a gradient not averaged over replicas, shards' softmax sums
merged without rescaling, a bank update not all-gathered) moves a step by a
large share of itself, far above these bounds.
"""

import numpy as np

#: float32's unit roundoff.
U = 2.0 ** -24


def reordered_sum_bound(terms, magnitude):
    """How far two float32 orders of a sum of ``terms`` terms whose absolute
    values sum to ``magnitude`` may lie apart: 2 (n - 1) u magnitude."""
    return 2.0 * max(terms - 1, 0) * U * magnitude


#: The tests' tiny ResNet-10 (width 1/8, `small_inputs`): base filters, one
#: block per stage, and the embedding's size.
TINY_FILTERS, TINY_STAGES, TINY_EMBEDDING = 8, 4, 16


def tiny_resnet_sums(batch, size, embedding=TINY_EMBEDDING):
    """Terms of each sum on the longest path of the tiny ResNet-10's forward pass
    over ``batch`` images of ``size`` px (batch norms over the global batch, as
    synchronised ones; unsynchronised ones sum fewer): the 3 x 3 x 3 stem; per
    stage s (side size / 2^s, 8 x 2^s filters) the pre-activation batch norm at
    the input's side, a 3 x 3 convolution, a batch norm and a 3 x 3
    convolution; the final batch norm, the global average pool, the 64-input
    heads and the normalisation of the ``embedding``-dimensional embedding."""
    sums, side, channels = [27], size, TINY_FILTERS
    for stage in range(TINY_STAGES):
        filters = TINY_FILTERS * 2 ** stage
        sums += [batch * side * side, 9 * channels]
        side //= 2 if stage else 1
        sums += [batch * side * side, 9 * filters]
        channels = filters
    return sums + [batch * side * side, side * side, channels, embedding]


def network_rtol(sums):
    """Relative error of the network's outputs between two orders of its chained
    ``sums`` (terms of each, `tiny_resnet_sums`; module docstring)."""
    return sum(reordered_sum_bound(n, 1.0) for n in sums)


def step_rtol(sums):
    """Relative difference of one step's weight moves between two orders of
    the forward pass's ``sums`` and the backward pass's as many (module docstring)."""
    return 2.0 * network_rtol(sums)


def softmax_term_bound(rtol, scale, terms):
    """How far a log-softmax (or log of a ratio of softmax sums) over ``terms``
    inputs may move when its inputs, of size at most ``scale``, carry a
    relative error ``rtol`` and its sums are reordered: each log-sum-exp moves
    by at most the largest move of its inputs (rtol scale) and by the relative
    error of its sum (2 (n - 1) u), and the term is a difference of two."""
    return 2.0 * (rtol * scale + reordered_sum_bound(terms, 1.0))


def metric_bound(value, batch, term_bound=0.0):
    """How far a metric ``value`` may move: the mean of ``batch`` non-negative
    per-example terms (their magnitudes sum to batch x value), each within
    ``term_bound``, their sum reordered."""
    return term_bound + reordered_sum_bound(batch, abs(float(value)))


def assert_same_metrics(want, got, bounds):
    """One step's metrics of two paths (name -> float or [1] array) agree:
    each within ``bounds[name]`` (absolute)."""
    assert set(got) == set(want)
    for name in want:
        a, b = float(np.ravel(want[name])[0]), float(np.ravel(got[name])[0])
        assert abs(a - b) <= bounds[name], (
            f"{name}: {b!r} against {a!r}, apart by {abs(a - b):.3g}, more than the bound "
            f"{bounds[name]:.3g}")


def assert_same_step_moves(start, want, got, rtol, what="weights"):
    """Two paths took one step from the weights ``start`` to ``want`` and
    ``got`` (lists of arrays in the same order): their moves differ by at
    most ``rtol`` of the move in norm over all weights, plus the rounding of
    the updated weights (2 u of their norm), and each variable's by as much
    (a variable that moved wrongly cannot hide). Returns that tolerance."""
    start = [np.asarray(s, np.float64) for s in start]
    moves = [np.asarray(w, np.float64) - s for w, s in zip(want, start, strict=True)]
    other = [np.asarray(g, np.float64) - s for g, s in zip(got, start, strict=True)]
    size = np.sqrt(sum(np.sum(m * m) for m in moves))
    assert size > 0, f"the {what} did not move"
    rounding = 2 * U * np.sqrt(sum(np.sum(np.square(np.asarray(w, np.float64))) for w in want))
    tolerance = rtol * size + rounding
    error = np.sqrt(sum(np.sum((m - o) ** 2) for m, o in zip(moves, other)))
    assert error <= tolerance, (
        f"the {what}' moves differ by {error:.3g}, more than {rtol:.3g} of their size "
        f"{size:.3g} (+ {rounding:.2g} of rounding)")
    for index, (m, o) in enumerate(zip(moves, other)):
        assert np.linalg.norm(m - o) <= tolerance, f"{what}[{index}]"
    return tolerance


def unit_row_write_bound(old, new, momentum, rtol):
    """Per row, how far a bank write ``new = normalise(m old + (1 - m) e)``
    (float [B, D] each, ``old`` as before the step) may move when the unit
    embedding e carries a relative error ``rtol``: the mix moves by (1 - m)
    rtol, and normalising divides that by the mix's norm (at most twice, for
    the direction), which follows from ``old``, ``new`` and |e| = 1:
    |mix| = m c + sqrt(m^2 c^2 - m^2 |old|^2 + (1 - m)^2), c = new.old; plus
    the rounding of the D-term norm and the mix (8 D u)."""
    old, new = np.asarray(old, np.float64), np.asarray(new, np.float64)
    m, dim = float(momentum), old.shape[1]
    c = np.sum(new * old, axis=1)
    mix = m * c + np.sqrt(np.maximum(m * m * c * c - m * m * np.sum(old * old, axis=1)
                                     + (1 - m) ** 2, 0.0))
    return 2 * (1 - m) * rtol / mix + 8 * dim * U


# ---- Multi-step bounds: kept for tests/training/methods/test_pseudo_label.py
# ---- and two_streams.assert_runs_agree, which it calls, until that file's
# ---- rewrite; every other test compares one step from the same state.

#: Relative difference of one step's weight moves (the former, looser derivation).
STEP_RTOL = 1e-3


def steps_rtol(steps):
    """The relative tolerance of ``steps`` steps' moves, or of metrics computed after them."""
    return steps * STEP_RTOL


def assert_same_moves(start, want, got, steps, what="weights"):
    """`assert_same_step_moves` at `steps_rtol` (``steps``), without the rounding term."""
    moves = [np.asarray(w, np.float64) - s for w, s in zip(want, start, strict=True)]
    other = [np.asarray(g, np.float64) - s for g, s in zip(got, start, strict=True)]
    size = np.sqrt(sum(np.sum(m * m) for m in moves))
    assert size > 0, f"the {what} did not move"
    error = np.sqrt(sum(np.sum((m - o) ** 2) for m, o in zip(moves, other)))
    tolerance = steps_rtol(steps) * size
    assert error <= tolerance, (
        f"the {what}' moves differ by {error:.3g}, more than {steps_rtol(steps):g} of their "
        f"size {size:.3g}")
    for index, (m, o) in enumerate(zip(moves, other)):
        assert np.linalg.norm(m - o) <= tolerance, f"{what}[{index}]"
    return tolerance


def assert_close_metrics(want, got, steps):
    """Per-step metrics (name -> [steps] arrays) agree to `steps_rtol` of
    ``steps`` relative to each metric's largest value."""
    for name in want:
        scale = max(np.max(np.abs(want[name])), np.finfo(np.float32).tiny)
        np.testing.assert_allclose(got[name], want[name], rtol=0,
                                   atol=steps_rtol(steps) * scale, err_msg=name)
