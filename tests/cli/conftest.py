"""Fixtures of the tools' tests: the export tests' shared export of the tiny run."""

from tests.after_training.export.conftest import tiny_llp_export  # noqa: F401
