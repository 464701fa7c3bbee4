"""The tools' (and benchmarks') quiet start: TensorFlow's start-up notices hidden, real
warnings kept."""

import ast
import os
import subprocess
import sys

import pytest

from llp_tf.cli import quiet_start
from tests.cli.tool_main import ROOT, tool_path

# Tools that import no TensorFlow at all (the launcher only starts processes),
# so starting them quietly would only cost TensorFlow's import.
NO_TENSORFLOW = ("compare_methods.py", "launch_local.py")

# Lines TensorFlow 2.21 printed on this machine at import and at the GPU probe.
NOTICES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795396076.140563     372 port.cc:153] oneDNN custom operations are on. "
    "You may see slightly different numerical results.\n",
    "I0000 00:00:1795396076.141020     372 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.\n",
    "I0000 00:00:1795396096.427044     456 cpu_feature_guard.cc:227] This TensorFlow binary "
    "is optimized to use available CPU instructions in performance-critical operations.\n",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.\n",
    "E0000 00:00:1795396348.055809    5392 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n",
]
KEPT = [
    "W0000 00:00:1795396431.459906    5778 op_kernel.cc:1858] OP_REQUIRES failed at "
    "save_restore_v2_ops.cc:233 : DATA_LOSS: Checksum does not match\n",
    "E0000 00:00:1795396431.459960    5778 cuda_driver.cc:1] CUDA_ERROR_OUT_OF_MEMORY\n",
    "Traceback (most recent call last):\n",
    "UserWarning: something a user should see\n",
]


# Runtime lines TensorFlow 2.21 printed on this machine before the tools' own one-line
# errors: a corrupt training image (1 worker and the 2nd of 2), a multi-worker start,
# the other worker killed, and truncated JPEGs (TensorFlow's line and libjpeg's own).
ECHOES = [
    "W0000 00:00:1795473306.703401   20732 local_rendezvous.cc:412] Local rendezvous is "
    "aborting with status: INVALID_ARGUMENT: Error in user-defined function passed to "
    "MapDataset:365 transformation with iterator: Iterator::Root::Prefetch::Map: assertion "
    "failed: [<<LLP_DATA_ERROR:Cannot read or decode the image:LLP_DATA_ERROR>>]\n",
    "\t [[{{node Assert/Assert}}]]\n",
    "\t [[MultiDeviceIteratorGetNextFromShard]]\n",
    "W0000 00:00:1795473342.815971   21008 dataset.cc:997] Input of GeneratorDatasetOp::Dataset "
    "will not be optimized because the dataset does not implement the AsGraphDefInternal() "
    "method needed to apply optimizations.\n",
    "W0000 00:00:1795473348.287476   21517 local_rendezvous.cc:412] Local rendezvous is "
    "aborting with status: CANCELLED: GetNextFromShard was cancelled\n",
    "\t [[RemoteCall]]\n",
    "E0000 00:00:1795474613.437049   14571 base_collective_executor.cc:252] "
    "BaseCollectiveExecutor::StartAbort UNAVAILABLE: Error reported from /job:worker/task:1: "
    "The following tasks are unhealthy (stopped sending heartbeats):\n",
    "/job:worker/replica:0/task:1\n",
    "The tasks have crashed. Check the task logs for an earlier error, or scheduler events "
    "(e.g. preemption, eviction) to debug further.\n",
    "The error could be from a previous operation. Restart your program to reset.\n",
    "\t [[{{function_node while_body_9501}}{{node while/CollectiveReduceV2}}]]\n",
    "E0000 00:00:1795474613.437049   14571 base_collective_executor.cc:252] "
    "BaseCollectiveExecutor::StartAbort UNAVAILABLE: failed to connect to all addresses\n",
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while "
    "calling /tensorflow.CoordinationService/Heartbeat:\n",
    ':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"failed to connect to '
    'all addresses; last error: UNKNOWN: ipv4:127.0.0.1:58077: Connection refused"}\n',
    "E0000 00:00:1795651587.510400   31722 jpeg_mem.cc:331] Premature end of JPEG data. "
    "Stopped at line 14/64\n",
    "Improper call to JPEG library in state 201\n",
    "Input file read error\n",
]


def test_notices_go_and_warnings_errors_and_other_text_stay():
    assert quiet_start.without_notices("".join(NOTICES)) == ""
    mixed = [line for pair in zip(NOTICES, KEPT + KEPT[:2]) for line in pair]
    assert quiet_start.without_notices("".join(mixed)) == "".join(KEPT + KEPT[:2])


def test_runtime_echoes_go_with_their_continuation_lines_and_other_lines_stay():
    assert list(quiet_start.filtered_lines(NOTICES + ECHOES)) == []
    # An indented line continues the message it follows, and only an echo goes.
    kept = [KEPT[0], "\tan indented line of a kept message\n", *KEPT[1:]]
    assert list(quiet_start.filtered_lines([ECHOES[0], *kept])) == kept
    assert list(quiet_start.filtered_lines(ECHOES[:3] + KEPT)) == KEPT


def test_libjpeg_lines_go_only_where_the_decode_fails():
    # The first, printed on this machine by libjpeg for a damaged JPEG that still
    # decoded, has no error of the tool after it: it stays, as does a line that only
    # starts like libjpeg's.
    kept = ["Corrupt JPEG data: 38 extraneous bytes before marker 0xd9\n",
            "Input file read error: /data/list.txt\n"]
    assert list(quiet_start.filtered_lines(ECHOES[-3:] + kept)) == kept


def test_a_tools_stderr_is_filtered_for_its_whole_run_and_nothing_is_lost_at_exit():
    # Echoes written after the start, a real warning, a progress bar's partial
    # line, and a last line written just before the process exits.
    script = ("import os, sys; "
              "from llp_tf.cli import quiet_start; quiet_start.import_tensorflow(['tool']); "
              f"os.write(2, {''.join(ECHOES[:3]) + KEPT[0]!r}.encode()); "
              "os.write(2, b'\\r 50%'); import time; time.sleep(0.3); "
              f"os.write(2, {''.join(ECHOES[3:]) + KEPT[1]!r}.encode()); "
              "sys.stderr.write('error: the last line\\n')")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0
    assert result.stderr.decode() == KEPT[0] + "\r 50%" + KEPT[1] + "error: the last line\n"


@pytest.mark.parametrize("argv, level", [
    ([], -1), (["--verbosity=0"], 0), (["--verbosity", "1"], 1), (["-v", "2"], 2),
    (["-v=0"], 0), (["--epochs=3", "--v=1"], 1), (["--verbosity=x"], -1),
    (["--verbosity=1", "--verbosity=-1"], -1), (["--", "--verbosity=1"], -1),
    (["--verbose=1"], -1),
])
def test_verbosity_is_read_from_the_command_line_as_absl_would(argv, level):
    assert quiet_start.requested_verbosity(["tool", *argv]) == level


def _stderr_of_help(*args):
    result = subprocess.run([sys.executable, tool_path("make_splits.py"), "--help", *args],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stderr


# Slow: a second process importing TensorFlow. make test keeps a process started quietly
# through `quiet_start` with nothing of TensorFlow's on its stderr (the filtered-stderr test
# above), every tool calling it before any import of TensorFlow (the last test), and a tool
# printing the notices when its verbosity asks (the next test).
@pytest.mark.slow
def test_a_tool_starts_quietly():
    assert _stderr_of_help() == ""


def test_a_tool_prints_the_notices_when_its_verbosity_asks():
    verbose = _stderr_of_help("--verbosity=0")
    # The lines are really printed, and hidden only by the quiet start.
    assert "oneDNN custom operations" in verbose or "cuda" in verbose.lower(), verbose


def _top_level_order(source):
    """('call' or an imported module's top name, `quiet_start` by its own name) of a
    module's top-level statements."""
    order = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            order += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["quiet_start"]:
            order.append("quiet_start")
        elif isinstance(node, ast.ImportFrom):
            order.append((node.module or "").split(".")[0])
        elif isinstance(node, ast.Expr) and "quiet_start.import_tensorflow" in ast.unparse(node):
            order.append("call")
    return order


def _all_imports(source):
    """Top names of every module ``source`` imports, at any depth."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names


def _scripts(folder):
    """Paths of the scripts with a main in ROOT/<folder>."""
    directory = os.path.join(ROOT, folder)
    paths = [os.path.join(directory, name) for name in sorted(os.listdir(directory))
             if name.endswith(".py")]
    return [path for path in paths if "__main__" in open(path).read()]


def _imports_of_help(path):
    """Which of TensorFlow and Keras the script at ``path`` imports to answer --help."""
    code = ("import runpy, sys\n"
            f"sys.argv = [{path!r}, '--help']; sys.path.insert(0, {os.path.dirname(path)!r})\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules), "
            "file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    return eval(result.stderr.strip().splitlines()[-1])  # noqa: S307 -- our own print


def test_every_tool_and_benchmark_starts_quietly_before_anything_imports_tensorflow():
    scripts = _scripts(os.path.join("llp_tf", "cli")) + _scripts("benchmarks")
    assert len(scripts) >= 15
    heavy = {"llp_tf", "tensorflow", "keras", "numpy", "config_flags", "jpeg_sets", "step_cost"}
    for path in scripts:
        name = os.path.basename(path)
        source = open(path).read()
        if name in NO_TENSORFLOW:
            # Nothing to quieten: it must then import nothing that imports TensorFlow (of
            # llp_tf: the method registry, which names methods without importing them, the
            # launcher and the comparison's runs).
            assert not (heavy - {"llp_tf"}) & _all_imports(source), name
            assert _imports_of_help(path) == [], name
            continue
        order = _top_level_order(source)
        assert "call" in order, name
        assert not heavy & set(order[:order.index("call")]), name
