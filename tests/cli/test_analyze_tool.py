import json
import os
import shutil

import pytest

from llp_tf.training import config, run_record
from tests.runs import file_contents
from tests.cli.tool_main import load_tool, run_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
OUTPUTS = ("aggregation_histogram.png", "aggregation_trajectory.png", "mds.png",
           "analysis_summary.txt", "analysis.json")
PROJECTOR_FILES = ("projector_config.pbtxt", "embeddings.tsv", "metadata.tsv")


analyze_tool = load_tool("analyze.py")


def _main(*args):
    """(exit code, stdout, stderr) of the tool's main, run in this process."""
    return run_main(analyze_tool, *args)


def _last_logged_score(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return json.loads(f.readlines()[-1])["aggregation_score"]


@pytest.fixture(scope="module")
def run_copy(tiny_llp_run, tmp_path_factory):
    """A copy of the tiny run, which the tool may write its analysis/ into."""
    copy = tmp_path_factory.mktemp("analyze") / "run"
    shutil.copytree(tiny_llp_run, copy)
    return str(copy)


def test_the_tool_prints_the_summary_and_writes_into_the_run(run_copy):
    code, out, err = _main(f"--run_dir={run_copy}", "--classes=2", "--points_per_class=15")
    assert code == 0, err
    assert err == ""
    assert f"mean over 4 classes: {_last_logged_score(run_copy):.4f} on true classes" in out
    assert "checkpoint 7/7 (step 15)" in out  # progress of the trajectory
    assert "kept checkpoints: step 3 (epoch 0.60)" in out
    assert "step 15, epoch 3 of 3 (warm-up" in out  # an epoch's end: no "3.0"
    assert "MDS: 30 bank rows (8 labelled) of classes" in out
    for name in OUTPUTS + tuple(os.path.join("projector", n) for n in PROJECTOR_FILES):
        path = os.path.join(run_copy, "analysis", name)
        assert f"  {path}\n" in out
        assert os.path.getsize(path) > 0
    with open(os.path.join(run_copy, "analysis", "mds.png"), "rb") as f:
        assert f.read(8) == PNG_MAGIC
    with open(os.path.join(run_copy, "analysis", "analysis_summary.txt")) as f:
        assert f.read() in out


def test_output_dir_class_ids_and_no_trajectory(run_copy, tmp_path):
    code, out, err = _main(f"--run_dir={run_copy}", f"--output_dir={tmp_path / 'a'}",
                           "--class_ids=3,1", "--points_per_class=4", "--notrajectory")
    assert (code, err) == (0, "")
    code, out0, err = _main(f"--run_dir={run_copy}", f"--output_dir={tmp_path / 'none'}",
                            "--points_per_class=2", "--notrajectory", "--projector_rows=0")
    assert (code, err) == (0, "")
    assert "projector" not in out0 and not os.path.exists(tmp_path / "none" / "projector")
    assert "kept checkpoints: not scored (trajectory skipped)" in out
    assert "checkpoint 1/" not in out
    # Labelled rows come first: the 4 drawn rows of each class are its 4 labelled ones.
    assert "MDS: 8 bank rows (8 labelled) of classes diagonal (1), vertical (3)" in out
    assert sorted(os.listdir(tmp_path / "a")) == sorted(OUTPUTS + ("projector",))
    with open(tmp_path / "a" / "analysis.json") as f:
        record = json.load(f)
    assert record["checkpoints"] == [] and record["mds"]["class_ids"] == [1, 3]


def test_the_default_classes_are_lowered_to_the_runs_with_a_note(run_copy, tmp_path):
    code, out, err = _main(f"--run_dir={run_copy}", f"--output_dir={tmp_path / 'a'}",
                           "--points_per_class=2", "--notrajectory")
    assert (code, err) == (0, "")
    assert ("note: the run's bank holds examples of 4 classes; using --classes=4 instead of "
            "the default 5 (give --classes to choose).\n") in out
    assert "MDS of 8 bank rows of 4 classes." in out


def test_a_rerun_replaces_its_report_but_no_file_it_did_not_write(run_copy, tmp_path):
    folder = tmp_path / "figures"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    for _ in range(2):  # the second run replaces the first one's report
        code, _, err = _main(f"--run_dir={run_copy}", f"--output_dir={folder}",
                             "--points_per_class=2", "--notrajectory")
        assert (code, err) == (0, "")
    assert sorted(os.listdir(folder)) == sorted(OUTPUTS + ("notes.txt", "projector"))
    (folder / "analysis.json").write_text('{"mine": true}')  # now not an analysis's
    before = file_contents(folder)
    code, out, err = _main(f"--run_dir={run_copy}", f"--output_dir={folder}", "--notrajectory")
    assert code == 1 and out == ""
    assert err == (f"error: {folder} holds aggregation_histogram.png, "
                   "aggregation_trajectory.png, mds.png, analysis_summary.txt and 4 more of no "
                   "earlier analysis (no analysis.json record of one), so the analysis does not "
                   "replace them: give another --output_dir.\n")
    assert "Traceback" not in err
    assert file_contents(folder) == before


@pytest.mark.parametrize("args, message", [
    (("--classes=5",), "asks for 5 classes, but the run's bank holds examples of only 4"),
    (("--class_ids=1,9",), "must be distinct classes in [0, 4)"),
    (("--class_ids=a,b",), "--class_ids must be class numbers"),
    (("--points_per_class=0",), "points_per_class"),
    (("extra",), "unexpected arguments: extra"),
])
def test_bad_settings_are_one_line_errors(run_copy, tmp_path, args, message):
    code, out, err = _main(f"--run_dir={run_copy}", f"--output_dir={tmp_path / 'x'}", *args)
    assert code == 1
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err
    assert not os.path.exists(tmp_path / "x")


def test_runs_it_cannot_analyse_are_clear_errors(tmp_path):
    code, _, err = _main()
    assert code == 1 and "give --run_dir" in err
    code, _, err = _main(f"--run_dir={tmp_path / 'missing'}")
    assert code == 1 and "does not exist" in err
    code, _, err = _main(f"--run_dir={tmp_path}")
    assert code == 1 and "is not a training run directory" in err
    run_record.save_config(config.TrainConfig.from_settings(run_dir=str(tmp_path / "sup"),
                                                      method="supervised"))
    code, _, err = _main(f"--run_dir={tmp_path / 'sup'}")
    assert code == 1 and "supervised run, which keeps no memory bank" in err


def test_help_documents_every_flag_from_the_command_line():
    # In this process, as the tool's script calls main (a script answering --help as a
    # process: test_checkout_tools.py; the scripts' quiet start: test_quiet_start.py).
    code, stdout, stderr = _main("--help")
    assert code == 0, stderr
    assert "Analyse the embedding of a trained LLP run" in stdout
    for flag in ("run_dir", "output_dir", "classes", "class_ids", "points_per_class",
                 "projector_rows", "seed", "[no]trajectory"):
        assert f"--{flag}" in stdout, flag
    assert "no_trajectory" not in stdout


def _projector_plugin_reads(folder):
    """(config, tensor float32 [S, D], metadata lines) of ``folder`` as TensorBoard's projector
    plugin serves them to the browser after ``tensorboard --logdir=FOLDER``."""
    import numpy as np
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.projector.projector_plugin import ProjectorPlugin
    from werkzeug.test import Client

    plugin = ProjectorPlugin(base_plugin.TBContext(logdir=str(folder)))
    apps = plugin.get_plugin_apps()

    def get(route, **query):
        response = Client(apps[route]).get(route, query_string=query)
        assert response.status_code == 200, response.get_data(as_text=True)
        return response.get_data()

    assert json.loads(get("/runs")) == ["."]
    config = json.loads(get("/info", run="."))
    (embedding,) = config["embeddings"]
    shape = [int(n) for n in embedding["tensorShape"]]
    tensor = np.frombuffer(get("/tensor", run=".", name=embedding["tensorName"]), np.float32)
    metadata = get("/metadata", run=".", name=embedding["tensorName"]).decode()
    return embedding, tensor.reshape(shape), metadata.splitlines()


def test_the_projector_plugin_reads_a_seeded_sample_of_the_bank(run_copy, tmp_path):
    import numpy as np
    from google.protobuf import text_format
    from tensorboard.plugins.projector import projector_config_pb2

    from llp_tf.after_training import run_loader
    from llp_tf.after_training.analysis import projector

    assert analyze_tool.DEFAULT_PROJECTOR_ROWS == projector.DEFAULT_ROWS
    assert analyze_tool.PROJECTOR_SUBDIR == projector.SUBDIR
    outputs = []
    for name in ("a", "b"):
        code, out, err = _main(f"--run_dir={run_copy}", f"--output_dir={tmp_path / name}",
                               "--points_per_class=2", "--notrajectory", "--projector_rows=50",
                               "--seed=3")
        assert (code, err) == (0, "")
        assert out.endswith("The bank in TensorBoard's projector: tensorboard --logdir "
                            f"{tmp_path / name / 'projector'}\n")
        outputs.append(file_contents(tmp_path / name / "projector"))
    assert outputs[0] == outputs[1]  # seeded
    folder = tmp_path / "a" / "projector"
    with open(folder / "projector_config.pbtxt") as f:
        config = text_format.Parse(f.read(), projector_config_pb2.ProjectorConfig())
    assert [(e.tensor_name, e.tensor_path, e.metadata_path, list(e.tensor_shape))
            for e in config.embeddings] == [("bank", "embeddings.tsv", "metadata.tsv", [50, 16])]

    embedding, tensor, lines = _projector_plugin_reads(folder)
    assert embedding["tensorName"] == "bank"
    assert lines[0].split("\t") == ["class", "labelled", "confidence", "true_class", "bank_row",
                                    "example"]
    rows = np.array([int(line.split("\t")[4]) for line in lines[1:]])
    assert tensor.shape == (50, 16) and rows.size == 50
    assert np.all(np.diff(rows) > 0) and rows.max() < 160  # distinct rows of the 160

    run, source = run_loader.load_run_with_data(run_copy)
    bank, names = run.bank, source.info.class_names
    np.testing.assert_array_equal(tensor, bank["embeddings"][rows])  # %.9g reads back
    labels, confidence = bank["labels"], bank["confidence"]
    labelled, true = bank["is_labelled"], source.train_labels()[run.used_index]
    for line, row in zip(lines[1:], rows):
        klass, is_labelled, conf, true_class, _, example = line.split("\t")
        assert klass == (names[labels[row]] if labels[row] < 4 else "none")
        assert is_labelled == ("yes" if labelled[row] else "no")
        assert float(conf) == pytest.approx(float(confidence[row]), abs=5e-5)  # 4 decimals
        assert true_class == names[true[row]]
        assert int(example) == run.used_index[row]
    assert {line.split("\t")[1] for line in lines[1:]} == {"yes", "no"}
    assert sum(klass != "none" for klass, *_ in (l.split("\t") for l in lines[1:])) > 8
