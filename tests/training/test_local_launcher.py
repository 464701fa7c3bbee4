"""llp_tf/training/local_launcher.py: the worker command and the words of a worker's
exit (the launch itself: tests/cli/test_launch_local.py)."""

import json
import signal
import sys

from llp_tf.training import local_launcher


def test_a_python_script_runs_with_this_python_and_exit_codes_are_passed_on():
    assert local_launcher.worker_command(["tools/train.py", "--regime=demo"]) == \
        [sys.executable, "tools/train.py", "--regime=demo"]
    assert local_launcher.worker_command(["python3", "x.py"]) == ["python3", "x.py"]
    assert local_launcher.describe(3) == (3, "exited with code 3")
    assert local_launcher.describe(-signal.SIGKILL) == (
        137, "was killed by SIGKILL (exit code 137)")


def test_each_worker_has_the_whole_cluster_and_its_own_index():
    config = json.loads(local_launcher.tf_config([5051, 5052], 1))
    assert config == {"cluster": {"worker": ["127.0.0.1:5051", "127.0.0.1:5052"]},
                      "task": {"type": "worker", "index": 1}}
