import io

import numpy as np

from llp_tf.training.progress import (EpochProgress, RunClock, format_metrics, format_table,
                                      format_value)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_when_not_a_terminal():
    stream = io.StringIO()
    progress = EpochProgress("epoch 1/3 (llp)", 10, 128, stream=stream, log_every_seconds=3600)
    progress.update(5, {"loss": 1.5})
    progress.update(10, {"loss": 1.25})
    lines = stream.getvalue().splitlines()
    # Throttled: only the epoch's last update is printed, as a plain line.
    assert len(lines) == 1 and "\r" not in stream.getvalue()
    assert lines[0].startswith("epoch 1/3 (llp) [####################] 10/10 loss 1.250 ")
    assert "img/s in" in lines[0]


def test_live_bar_on_a_terminal(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    stream = _Terminal()
    progress = EpochProgress("epoch 2/3 (warmup)", 4, 64, start_step=1, stream=stream)
    progress.update(2, {"loss": 2.0})
    assert stream.getvalue().startswith("\repoch 2/3 (warmup) [##########..........] 2/4")
    assert "ETA" in stream.getvalue()


def test_ci_gets_plain_lines_even_on_a_terminal(monkeypatch):
    monkeypatch.setenv("CI", "true")
    stream = _Terminal()
    EpochProgress("e", 2, 8, stream=stream).update(2, {})
    assert not stream.getvalue().startswith("\r")


def test_the_run_clock_estimates_the_rest_of_the_run_at_its_pace_so_far():
    clock = RunClock(start_step=10, total_steps=110)
    start = clock._start
    assert clock.remaining(10, start + 5.0) is None  # no step yet
    assert clock.remaining(30, start + 10.0) == 80 * 0.5  # 20 steps in 10 s
    assert clock.remaining(110, start + 60.0) == 0.0


def test_a_mid_loop_update_keeps_the_last_metrics():
    stream = io.StringIO()
    progress = EpochProgress("e", 4, 8, stream=stream, log_every_seconds=0)
    progress.update(2, {"loss": 1.5})
    progress.update(3)
    assert stream.getvalue().splitlines()[1].startswith("e [###############.....] 3/4 loss 1.500 ")


def test_integers_print_as_integers_and_the_learning_rate_in_full():
    assert format_value("val_examples", 1000) == "1000"
    assert format_value("epoch", np.int64(40)) == "40"
    assert format_value("learning_rate", 0.00375) == "0.00375"  # not 0.0037 or 0.0038
    assert format_value("learning_rate", np.float32(0.1) * np.float32(0.1)) == "0.01"
    # Other floats: 4 significant digits, the decimal point kept, so 1.0 is no integer.
    assert format_value("confidence", 1.0) == "1.000"
    assert format_value("val_top1", np.float32(0.98766)) == "0.9877"
    assert format_value("weight_decay", 0.0001234) == "0.0001234"
    assert format_value("phase", "llp") == "llp"
    assert format_metrics({"epoch": 2, "loss": 2.302585, "learning_rate": 0.0375}) == \
        "epoch 2 loss 2.303 learning_rate 0.0375"


def test_the_final_table_prints_integers_as_integers_and_the_learning_rate_in_full():
    assert format_table({
        "epoch": 40, "phase": "llp", "learning_rate": 0.00375, "confidence": 1.0,
        "val_examples": 1000}).splitlines() == [
        "metric         value", "-------------  ------", "epoch          40",
        "phase          llp", "learning_rate  0.00375", "confidence     1.000",
        "val_examples   1000"]
