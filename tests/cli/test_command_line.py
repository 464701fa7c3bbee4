"""The flags and helpers the tools share (llp_tf/cli/command_line.py)."""

import io
import socket

import pytest
from absl import flags

from llp_tf.errors import ConfigError
from llp_tf.cli import command_line


def test_free_ports_are_distinct_and_bindable():
    ports = command_line.free_ports(3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_default_above_what_is_available_is_lowered_with_a_note():
    values = command_line.new_flag_values()
    flags.DEFINE_integer("classes", 5, "C.", flag_values=values)
    stream = io.StringIO()
    command_line.parse(values, ["tool"], "usage", stream, stream)
    assert command_line.default_at_most(values, "classes", 9, stream, "there are 9") == 5
    assert stream.getvalue() == ""
    assert command_line.default_at_most(values, "classes", 3, stream, "there are 3") == 3
    assert stream.getvalue() == ("note: there are 3; using --classes=3 instead of the default 5 "
                                 "(give --classes to choose).\n")
    command_line.parse(values, ["tool", "--classes=5"], "usage", stream, stream)
    assert command_line.default_at_most(values, "classes", 3, io.StringIO(), "there are 3") == 5



def _origin_flags():
    values = command_line.new_flag_values()
    flags.DEFINE_integer("epochs", 300, "E.", flag_values=values)
    flags.DEFINE_integer("warmup_epochs", 10, "W.", flag_values=values)
    flags.DEFINE_integer("verbosity", -1, "V.", short_name="v", flag_values=values)
    flags.DEFINE_boolean("small_inputs", False, "S.", flag_values=values)
    flags.DEFINE_integer("labelled_limit", 0, "L.", flag_values=values)
    return values


def test_flag_origins_follow_absl_the_last_setting_wins(tmp_path):
    (tmp_path / "inner.flags").write_text("--verbosity=1\n")
    (tmp_path / "regime.flags").write_text(
        "# a comment\n--epochs=40\n--warmup_epochs=10\n--nosmall_inputs\n"
        f"--flagfile={tmp_path / 'inner.flags'}\n")
    values = _origin_flags()
    argv = ["tool", "--epochs=3", f"--flagfile={tmp_path / 'regime.flags'}", "--labelled_limit",
            "4", "-v", "0", "--", "--warmup_epochs=1"]
    values(argv)
    assert (values.epochs, values.verbosity, values.labelled_limit) == (40, 0, 4)
    assert command_line.flag_origins(values, argv) == {
        "help": "default", "epochs": f"from {tmp_path / 'regime.flags'}",
        "warmup_epochs": f"from {tmp_path / 'regime.flags'}",
        "small_inputs": f"from {tmp_path / 'regime.flags'}", "verbosity": "command line",
        "labelled_limit": "command line"}
    named = command_line.flag_origins(values, ["tool", "--flagfile", str(tmp_path / "inner.flags")],
                                  {str(tmp_path / "inner.flags"): "flags/inner.flags"})
    assert named["verbosity"] == "from flags/inner.flags"


@pytest.mark.parametrize("spelling", ["--helpfull", "-helpfull", "--helpshort"])
def test_absls_other_help_spellings_print_the_help(spelling):
    values, out, err = _origin_flags(), io.StringIO(), io.StringIO()
    rest, code = command_line.parse(values, ["tool", spelling, "--epochs=3"], "usage", out, err)
    assert (rest, code, err.getvalue()) == (None, 0, "")
    assert out.getvalue().startswith("usage\nFlags:\n") and "--epochs: E." in out.getvalue()
    # After "--" it is an argument like any other.
    values, out = _origin_flags(), io.StringIO()
    rest, code = command_line.parse(values, ["tool", "--", "--helpfull"], "usage", out, err,
                                positional=True)
    assert (rest, code, out.getvalue()) == (["--helpfull"], None, "")


def test_a_settings_error_of_a_tool_names_where_each_value_came_from():
    def body(values, stdout, stderr):
        raise ConfigError("{warmup_epochs} cannot exceed {epochs}.",
                          settings={"warmup_epochs": 10, "epochs": values.epochs})

    err = io.StringIO()
    code = command_line.run(["tool", "--epochs=3"], io.StringIO(), err, _origin_flags(), "usage",
                        body)
    assert code == 1 and err.getvalue() == (
        "error: --warmup_epochs=10 (default) cannot exceed --epochs=3 (command line).\n")


def test_the_words_after_the_first_separator_are_not_the_tools():
    assert command_line.split_at_dashes(["l", "--workers=3", "--", "x.py", "--help", "--"]) == \
        (["l", "--workers=3"], ["x.py", "--help", "--"])
    assert command_line.split_at_dashes(["l", "--workers=3"]) == (["l", "--workers=3"], [])
