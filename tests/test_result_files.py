"""llp_tf/result_files.py: a results file replaces only an earlier result."""

import json
import os

import pytest

from llp_tf import result_files
from llp_tf.errors import ConfigError


def test_a_results_file_replaces_only_an_earlier_result_of_the_tool(tmp_path):
    path = tmp_path / "results.json"
    result_files.write_json_atomically(str(path), {"top1": 0.5, "seeds": [0]}, ("top1",))
    result_files.write_json_atomically(str(path), {"top1": 0.75}, ("top1",))  # an earlier result
    assert json.loads(path.read_text()) == {"top1": 0.75}
    for text in ('{"run": {"run_dir": "runs/demo"}}', '["top1"]', "top1: 0.5"):
        path.write_text(text)
        with pytest.raises(ConfigError) as error:
            result_files.write_json_atomically(str(path), {"top1": 0.75}, ("top1",))
        assert str(error.value) == (f"{path} exists and is not an earlier result of this tool "
                                    "(a JSON object with top1), so it is not replaced: give "
                                    "another --output.")
        assert path.read_text() == text and os.listdir(tmp_path) == ["results.json"]
