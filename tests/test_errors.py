"""Errors about settings name each as a flag with its value, and where it came from
once the entry point knows."""

from llp_tf.errors import ConfigError, DataError, LLPError


def test_an_error_names_its_settings_and_gains_their_origins():
    error = DataError("{dataset} has 1 class; {k} is no setting of it",
                      settings={"dataset": "folder:/d"})
    assert str(error) == "--dataset=folder:/d has 1 class; {k} is no setting of it"
    named = error.with_origins({"dataset": "command line", "k": "default"})
    assert type(named) is DataError and isinstance(named, ValueError)
    assert str(named) == "--dataset=folder:/d (command line) has 1 class; {k} is no setting of it"
    assert named.template == error.template and named.settings == error.settings


def test_an_error_without_settings_is_its_message_and_stays_itself():
    error = ConfigError("Give {braces} as they are.")
    assert str(error) == "Give {braces} as they are."
    assert error.with_origins({"braces": "command line"}) is error
    assert isinstance(LLPError("x").with_origins({}), LLPError)
