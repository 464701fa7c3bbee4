"""Fixtures of the model tests."""

import pytest

from tests.models.helpers import random_images


@pytest.fixture
def images():
    """float32 [8, 16, 16, 3] random normalised images."""
    return random_images(8)
