"""load_source: the name forms and the message for an unknown one."""

import pytest

from llp_tf.data import NAME_FORMS, load_source
from llp_tf.errors import DataError


@pytest.mark.parametrize("name", ["imagenet", "tfds:", "folder", "s3:bucket", ""])
def test_unknown_name_lists_the_forms(name):
    with pytest.raises(DataError) as error:
        load_source(name)
    message = str(error.value)
    assert NAME_FORMS in message and "\n" not in message
