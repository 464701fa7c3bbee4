"""Config fields carry their flag's metadata; choices are checked from it; messages
name settings as flags."""

import dataclasses

from llp_tf.config_fields import choice_problems, flag_name, name_settings, setting


@dataclasses.dataclass(frozen=True)
class _Section:
    colour: str = setting("red", "A colour.", choices=["red", "blue"], state=True)
    size: int = setting(3, "A size.", flag="size_px")


def test_a_setting_carries_help_choices_flag_and_state():
    colour, size = dataclasses.fields(_Section)
    assert colour.metadata == {"help": "A colour.", "choices": ("red", "blue"), "flag": None,
                               "state": True}
    assert (flag_name(colour), flag_name(size)) == ("colour", "size_px")
    assert not size.metadata["state"]


def test_choice_problems_name_each_field_outside_its_choices():
    assert choice_problems(_Section()) == []
    assert choice_problems(_Section(colour="green", size=99)) == [
        "{colour} must be one of red, blue"]


def test_a_message_names_settings_as_flags_with_their_values_and_origins():
    values = {"epochs": 3, "k": 10, "jit_compile": True, "small_inputs": False,
              "lr_drop_epochs": (30, 40), "split_file": None, "dataset": "folder:/d"}
    message = ("{epochs}, {k}, {jit_compile}, {small_inputs}, {lr_drop_epochs}, {split_file}, "
               "{dataset}; {other} and {not a name} stay")
    assert name_settings(message, values) == (
        "--epochs=3, --k=10, --jit_compile, --nosmall_inputs, --lr_drop_epochs=30,40, "
        "--split_file unset, --dataset=folder:/d; {other} and {not a name} stay")
    assert name_settings("{epochs} exceeds {k}", values,
                         {"epochs": "command line", "k": "from flags/demo.flags"}) == \
        "--epochs=3 (command line) exceeds --k=10 (from flags/demo.flags)"
