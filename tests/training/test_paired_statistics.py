"""llp_tf/training/paired_statistics.py: intervals against float64 numpy with the t quantile
from a table, and the claim rule on differences chosen to fall on each side of it."""

import math

import numpy as np
import pytest

from llp_tf.training import paired_statistics as stats

#: Student's t quantiles in closed form (Hill 1970): at 2 degrees of freedom
#: (2p - 1) / sqrt(2 p (1 - p)); at 4, 2 sqrt(q - 1), q = cos(arccos(sqrt(a)) / 3) / sqrt(a),
#: a = 4 p (1 - p). At p = 0.975: 4.303 and 2.776, as any table gives.
P = 0.975
_A = 4 * P * (1 - P)
T_975 = {2: (2 * P - 1) / math.sqrt(2 * P * (1 - P)),
         4: 2 * math.sqrt(math.cos(math.acos(math.sqrt(_A)) / 3) / math.sqrt(_A) - 1)}


@pytest.mark.parametrize("values", [[0.81, 0.84, 0.86], [0.1, 0.5, 0.2, 0.4, 0.3]])
def test_the_interval_is_mean_plus_minus_t_s_over_root_n(values):
    x = np.asarray(values, np.float64)
    n = x.size
    half = T_975[n - 1] * np.sqrt(np.sum((x - x.mean()) ** 2) / (n - 1)) / np.sqrt(n)
    got = stats.t_interval(values)
    assert got.count == n
    # float64 sums of a handful of numbers below 1: within a few ulps of 1.
    np.testing.assert_allclose([got.mean, got.low, got.high],
                               [x.mean(), x.mean() - half, x.mean() + half], rtol=0, atol=1e-14)


def test_one_value_has_no_interval_and_decides_nothing():
    one = stats.t_interval([0.5])
    assert (one.mean, one.low, one.high) == (0.5, None, None)
    assert stats.relation(one, 0.02) == stats.NOT_RESOLVED
    assert stats.verdict(">", one, 0.02) == stats.NOT_RESOLVED


def _interval(low, high):
    return stats.Interval((low + high) / 2, low, high, 3)


@pytest.mark.parametrize("low,high,relation,greater,equivalent", [
    (0.05, 0.09, ">", "holds", "does not hold"),           # above 0 and above the margin
    (0.005, 0.015, ">", "holds", "holds"),                 # above 0, inside the margin
    (-0.01, 0.015, "≈", "does not hold", "holds"),         # around 0 inside the margin
    (-0.09, -0.05, "<", "does not hold", "does not hold"),
    (-0.01, 0.06, "not resolved", "not resolved", "not resolved"),  # wide, over 0
    (0.01, 0.05, ">", "holds", "not resolved"),            # above 0, may be within margin
])
def test_the_claim_rule(low, high, relation, greater, equivalent):
    interval = _interval(low, high)
    assert stats.relation(interval, 0.02) == relation
    assert stats.verdict(">", interval, 0.02) == greater
    assert stats.verdict("≈", interval, 0.02) == equivalent


def test_several_claims_hold_together_fail_with_one_or_stay_open():
    assert stats.overall(["holds", "holds"]) == "holds"
    assert stats.overall(["holds", "not resolved"]) == "not resolved"
    assert stats.overall(["not resolved", "does not hold"]) == "does not hold"
    assert stats.overall([]) == "not resolved"
    with pytest.raises(ValueError, match="claim must be"):
        stats.verdict("<", _interval(0.1, 0.2), 0.02)
