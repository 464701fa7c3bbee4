"""Means over a few labelled sets, their 95% confidence intervals, and the rule that decides an
ordering claim between two methods trained on the same sets. Imports no TensorFlow.

Interval: Student t over the n values (n - 1 degrees of freedom), mean +- t_{0.975, n-1} s /
sqrt(n), s the sample standard deviation (ddof 1); none for n < 2. A claim between methods A
and B is tested on the paired differences A_s - B_s over the same labelled sets s:

- ">": holds when the differences' interval lies above 0; does not hold when it lies below 0
  or within [-margin, margin] (no difference worth the name);
- "≈": holds when the interval lies within [-margin, margin]; does not hold when it lies
  wholly above margin or below -margin;
- otherwise, or with fewer than 2 sets: "not resolved".

The margin is fixed before any run is read (docs/methods.md gives its value and reason)."""

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.stats

#: The confidence level of every interval.
LEVEL = 0.95
#: The verdicts of a claim.
HOLDS, FAILS, NOT_RESOLVED = "holds", "does not hold", "not resolved"
#: The relations a claim may state.
GREATER, EQUIVALENT = ">", "≈"


class Interval(NamedTuple):
    """The mean of n values and its `LEVEL` Student t interval (low, high: None for n < 2)."""
    mean: float
    low: float | None
    high: float | None
    count: int


def t_interval(values: Sequence[float]) -> Interval:
    """`Interval` of ``values`` (float64 arithmetic)."""
    values = np.asarray(values, np.float64)
    count = int(values.size)
    mean = float(values.mean())
    if count < 2:
        return Interval(mean, None, None, count)
    half = (float(scipy.stats.t.ppf(0.5 + LEVEL / 2, count - 1))
            * float(values.std(ddof=1)) / math.sqrt(count))
    return Interval(mean, mean - half, mean + half, count)


def relation(difference: Interval, margin: float) -> str:
    """What the paired differences' interval shows: ">" (above 0), "<" (below 0), "≈"
    (within [-margin, margin], including 0) or `NOT_RESOLVED`."""
    if difference.low is None:
        return NOT_RESOLVED
    if difference.low > 0:
        return ">"
    if difference.high < 0:
        return "<"
    if -margin <= difference.low and difference.high <= margin:
        return EQUIVALENT
    return NOT_RESOLVED


def verdict(claim: str, difference: Interval, margin: float) -> str:
    """`HOLDS`, `FAILS` or `NOT_RESOLVED` for the claim "A ``claim`` B" (`GREATER` or
    `EQUIVALENT`) on the `Interval` of the paired differences A - B (module docstring)."""
    if difference.low is None:
        return NOT_RESOLVED
    low, high = difference.low, difference.high
    within = -margin <= low and high <= margin
    if claim == GREATER:
        if low > 0:
            return HOLDS
        return FAILS if high < 0 or within else NOT_RESOLVED
    if claim == EQUIVALENT:
        if within:
            return HOLDS
        return FAILS if low > margin or high < -margin else NOT_RESOLVED
    raise ValueError(f"claim must be {GREATER!r} or {EQUIVALENT!r}, not {claim!r}.")


def overall(verdicts: Sequence[str]) -> str:
    """Several claims together: `FAILS` if one fails, `HOLDS` if all hold, else
    `NOT_RESOLVED`."""
    if FAILS in verdicts:
        return FAILS
    return HOLDS if verdicts and all(v == HOLDS for v in verdicts) else NOT_RESOLVED
