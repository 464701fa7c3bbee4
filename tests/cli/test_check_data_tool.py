"""tools/check_data.py: every bad image of both splits named, its exit code, and
the exclude list it writes (which training reads back)."""

import subprocess
import sys

import pytest

from llp_tf.data.sources.registry import load_source
from llp_tf.data.splits import exclusions
from tests.data.helpers import write_image_folder
from tests.cli.tool_main import ROOT, load_tool, run_main, tool_path

CHECK_DATA = load_tool("check_data.py")


@pytest.fixture
def damaged(tmp_path):
    """(root, {(split, index): path}) of an image folder with three bad images."""
    train = write_image_folder(str(tmp_path / "data" / "train"), {"a": 5, "b": 5})
    validation = write_image_folder(str(tmp_path / "data" / "validation"), {"a": 2, "b": 2},
                                    seed=1)
    bad = {("train", 1): train[1], ("train", 8): train[8], ("validation", 2): validation[2]}
    for (_, index), (path, _, content) in bad.items():
        with open(path, "wb") as f:
            f.write(content[:len(content) // 3] if index == 8 else b"")
    return tmp_path / "data", {key: value[0] for key, value in bad.items()}


def test_the_command_line_names_every_bad_image_and_writes_an_exclude_list(damaged, tmp_path):
    root, bad = damaged
    listed = tmp_path / "bad.txt"
    result = subprocess.run([sys.executable, tool_path("check_data.py"),
                             f"--dataset=folder:{root}", f"--write_exclude_list={listed}"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("bad: ")] == [
        f"bad: {split} example {index}: file {path}" for (split, index), path in bad.items()]
    assert [line.split(" [")[0] for line in lines if " [" in line] == [
        "checking train", "checking validation"]
    assert any(line.startswith("checking train [####################] 10/10 bad 2 ")
               for line in lines)
    assert lines[-2].startswith(f"folder:{root}: checked 10 training and 4 validation images in ")
    assert lines[-2].endswith("images/s); 3 cannot be read or decoded.")
    assert lines[-1] == (f"Wrote 3 examples to the exclude list {listed}; a new run given "
                         f"--exclude_list={listed} leaves them out.")
    excluded = exclusions.read_exclude_list(str(listed), load_source(f"folder:{root}"))
    assert (excluded.train.tolist(), excluded.validation.tolist()) == ([1, 8], [2])


def test_a_clean_dataset_exits_0(tmp_path):
    write_image_folder(str(tmp_path / "data"), {"a": 3, "b": 2})
    listed = tmp_path / "none.txt"
    code, out, err = run_main(CHECK_DATA, f"--dataset=folder:{tmp_path / 'data'}",
                              f"--write_exclude_list={listed}")
    assert (code, err) == (0, "")
    assert "checked 5 training and 0 validation images" in out
    assert out.splitlines()[-2].endswith("images/s); all read and decode.")
    assert listed.read_text().count("\n") == 1  # only its heading comment


def test_a_list_it_wrote_is_replaced_and_any_other_file_refused_before_the_check(tmp_path):
    write_image_folder(str(tmp_path / "data"), {"a": 3, "b": 2})
    listed = tmp_path / "list.txt"
    for _ in range(2):  # the second run replaces the first one's list
        code, _, err = run_main(CHECK_DATA, f"--dataset=folder:{tmp_path / 'data'}",
                                f"--write_exclude_list={listed}")
        assert (code, err) == (0, "")
    listed.write_text("train 3  # by hand\n")
    code, out, err = run_main(CHECK_DATA, f"--dataset=folder:{tmp_path / 'data'}",
                              f"--write_exclude_list={listed}")
    assert code == 1 and out == ""
    assert err == (f"check_data: {listed} exists and is not an exclude list this tool wrote, so "
                   "it is not replaced: give another --write_exclude_list.\n")
    assert "Traceback" not in err and listed.read_text() == "train 3  # by hand\n"


def test_a_dataset_that_cannot_be_opened_is_one_error_line(tmp_path):
    code, out, err = run_main(CHECK_DATA, f"--dataset=folder:{tmp_path / 'missing'}")
    assert code == 1 and out == ""
    assert err.startswith("check_data: Image folder ") and err.count("\n") == 1


@pytest.mark.slow
def test_truncated_jpegs_are_named_without_libjpegs_own_lines(tmp_path):
    # Cut in the header, in the scan and before the end marker, libjpeg and
    # TensorFlow print "Improper call to JPEG library", "Premature end of JPEG
    # data" or "Input file read error" on file descriptor 2 as the decode fails.
    written = write_image_folder(str(tmp_path / "data"), {"a": 6, "b": 2}, size=(40, 40))
    jpegs = [(path, content) for path, _, content in written if path.endswith(".jpg")][:3]
    for (path, content), cut in zip(jpegs, (len(jpegs[0][1]) // 4, len(jpegs[1][1]) // 2, -2)):
        with open(path, "wb") as f:
            f.write(content[:cut])
    result = subprocess.run([sys.executable, tool_path("check_data.py"),
                             f"--dataset=folder:{tmp_path / 'data'}"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 1
    assert [line for line in result.stdout.splitlines() if line.startswith("bad: ")] == [
        f"bad: train example {index}: file {path}"
        for index, (path, _, _) in enumerate(written) if path in dict(jpegs)]
    assert result.stderr == ""
