"""Training: methods, the controller that owns the loop, its actions, the run directory.
`run_training(config)` loads on first use, so the run directory's modules do not import the
training stack."""

__all__ = ["TrainingDiverged", "run_training"]


def __getattr__(name):
    if name == "run_training":
        from llp_tf.training.assembly import run_training  # noqa: PLC0415
        return run_training
    if name == "TrainingDiverged":
        from llp_tf.training.actions import TrainingDiverged  # noqa: PLC0415
        return TrainingDiverged
    raise AttributeError(f"module 'llp_tf.training' has no attribute {name!r}")
