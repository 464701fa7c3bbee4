import pytest

from llp_tf.training import schedule


@pytest.mark.parametrize("epoch,want", [(0, 0.03), (193, 0.03), (194, 0.003), (238, 0.003),
                                        (239, 0.0003), (299, 0.00003), (400, 0.00003)])
def test_learning_rate_drops_at_the_regime_epochs(epoch, want):
    got = schedule.learning_rate_at(epoch, 0.03, (194, 239, 299), 0.1)
    assert got == pytest.approx(want)


def test_plateau_drops_multiply_in():
    assert schedule.learning_rate_at(5, 0.03, (10,), 0.1, plateau_drops=2) == pytest.approx(3e-4)


def test_plateau_tracker_drops_after_patience_evaluations_without_improvement():
    tracker = schedule.PlateauTracker(patience=2)
    decisions = [tracker.update(m) for m in (0.5, 0.6, 0.6, 0.59, 0.7, 0.7, 0.7, 0.7, 0.7)]
    assert decisions == [False, False, False, True, False, False, True, False, True]
    assert int(tracker.drops.numpy()) == 3


def test_plateau_tracker_with_zero_patience_never_drops():
    tracker = schedule.PlateauTracker(patience=0)
    assert not any(tracker.update(0.5) for _ in range(10))
