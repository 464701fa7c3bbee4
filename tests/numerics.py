"""How far two float32 computations of the same training steps may differ.

Two runs that differ only in the order of their float32 sums (one replica
against two, XLA against TensorFlow's kernels, host against device-side
augmentation, one CPU's blocking or oneDNN ISA against another's) round
differently. The bound, for the tiny models of the tests:

- one sum of n terms (a convolution's gradient sums batch x pixels, n up to
  about 4,096) carries about sqrt(n) u of relative error, u = 2^-24 =
  6e-8: 4e-6;
- the backward pass chains about 10 such layers (x10), and batch norm over
  8-16 images divides by a batch standard deviation that can be a tenth of
  the activations' size (x10): 4e-4 relative to the gradient's size;
- so one step's moves (lr x gradient + weight decay) agree to `STEP_RTOL` =
  1e-3 of their size, measured over all weights together (single weights
  near zero can differ by more, relative to themselves);
- over k steps with lr x curvature below 1, the first-order error
  e_{t+1} = (I - lr H) e_t + d_t grows by at most one step's bound a step:
  k x `STEP_RTOL` of the total move.

A real fault (a gradient not averaged over replicas, a term dropped, a
stale weight) changes the move by a large fraction of itself, far above
these bounds.
"""

import numpy as np

#: Relative difference of one step's weight moves between two float32 orders of summation.
STEP_RTOL = 1e-3


def steps_rtol(steps):
    """The relative tolerance of ``steps`` steps' moves, or of metrics computed after them."""
    return steps * STEP_RTOL


def assert_same_moves(start, want, got, steps, what="weights"):
    """Two runs from the same weights ``start`` ended at ``want`` and ``got``
    (lists of numpy arrays in the same order) after ``steps`` steps: the
    difference of their moves is at most `steps_rtol` of the move, in the
    norm over all weights, and over each variable relative to the whole
    move (so that a variable that moved wrongly cannot hide)."""
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


def assert_close_metrics(want, got, steps):
    """Per-step metrics (name -> [steps] arrays) of two such runs agree to
    `steps_rtol` of ``steps`` relative to each metric's largest value."""
    for name in want:
        scale = max(np.max(np.abs(want[name])), np.finfo(np.float32).tiny)
        np.testing.assert_allclose(got[name], want[name], rtol=0,
                                   atol=steps_rtol(steps) * scale, err_msg=name)


def assert_close_values(want, got, steps, what="values"):
    """Arrays (or scalars, or lists of 1-D arrays taken as one) of two such
    runs after ``steps`` steps agree to `steps_rtol` of ``steps`` in norm,
    relative to ``want``'s norm (non-finite entries exactly): for final
    states and epoch figures of runs whose start is not at hand."""
    if isinstance(want, list):  # a group of arrays, compared as one
        want, got = np.concatenate(want), np.concatenate(got)
    want, got = np.asarray(want, np.float64).ravel(), np.asarray(got, np.float64).ravel()
    # Infinities (a plateau tracker's best before any evaluation) must match exactly.
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=what)
    want, got = want[finite], got[finite]
    error, size = np.linalg.norm((got - want).ravel()), np.linalg.norm(want.ravel())
    assert error <= steps_rtol(steps) * size, (
        f"{what}: {got.ravel()[:4]} against {want.ravel()[:4]}, apart by {error:.3g} in norm, "
        f"more than {steps_rtol(steps):g} of {size:.3g} after {steps} steps")
