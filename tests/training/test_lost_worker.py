"""A lost worker's collective error as one line."""

import pytest
import tensorflow as tf

from llp_tf.training.lost_worker import WorkerLost, lost_worker_message, report_lost_worker

# The reports a survivor got on this machine (TensorFlow 2.21, two CPU workers)
# when the other one was killed with SIGKILL: worker 1 lost, then worker 0.
WORKER_1_LOST = (
    "{{function_node __inference_<lambda>_12858}} Collective ops is aborted by: Error reported "
    "from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):\n"
    "/job:worker/replica:0/task:1\nThe tasks have crashed. Check the task logs for an earlier "
    "error, or scheduler events (e.g. preemption, eviction) to debug further.\nThe error could "
    "be from a previous operation. Restart your program to reset.\n\t [[{{function_node "
    "while_body_9501}}{{node while/CollectiveReduceV2}}]] [Op:__inference_<lambda>_12858]")
CONNECTION_RESET = "Collective ops is aborted by: recvmsg:Connection reset by peer"


def _write_checkpoint(run_dir, step):
    checkpoint = tf.train.Checkpoint(step=tf.Variable(step, dtype=tf.int64))
    manager = tf.train.CheckpointManager(checkpoint, f"{run_dir}/checkpoints", max_to_keep=3)
    return manager.save(checkpoint_number=step)


def test_the_message_names_the_lost_worker_and_the_checkpoint_a_relaunch_resumes_from(
        tmp_path):
    path = _write_checkpoint(tmp_path, 5)
    assert lost_worker_message(WORKER_1_LOST, str(tmp_path), ("worker", 0)) == (
        "Lost worker 1 of the cluster (killed, out of memory or its node lost), so worker 0 "
        "stopped too. Relaunch every worker with the same command: the run resumes from its "
        f"checkpoint at step 5 ({path}).")
    # A report that names no other task, and a run without a checkpoint yet.
    assert lost_worker_message(CONNECTION_RESET, str(tmp_path / "new"), ("worker", 1)) == (
        "Lost another worker of the cluster (killed, out of memory or its node lost), so "
        "worker 1 stopped too. Relaunch every worker with the same command: the run resumes "
        "from the start (it has no checkpoint yet).")


def test_only_collective_errors_become_worker_lost(tmp_path):
    with pytest.raises(WorkerLost, match="^Lost another worker"):
        with report_lost_worker(str(tmp_path), ("worker", 0)):
            raise tf.errors.UnavailableError(None, None, CONNECTION_RESET)
    with pytest.raises(tf.errors.UnavailableError, match="dispatcher"):
        with report_lost_worker(str(tmp_path), ("worker", 0)):
            raise tf.errors.UnavailableError(None, None, "the tf.data dispatcher is down")
