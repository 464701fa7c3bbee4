import io

from llp_tf.training.progress import EpochProgress, RunClock


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
    assert lines[0].startswith("epoch 1/3 (llp) [####################] 10/10 loss 1.25")
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
    assert stream.getvalue().splitlines()[1].startswith("e [###############.....] 3/4 loss 1.5 ")
