"""Config fields carry their flag's metadata; choices are checked from it."""

import dataclasses

from llp_tf.config_fields import choice_problems, flag_name, setting


@dataclasses.dataclass(frozen=True)
class _Section:
    colour: str = setting("red", "A colour.", choices=["red", "blue"], state=True)
    size: int = setting(3, "A size.", flag="size_px", aliases=("old_size",))


def test_a_setting_carries_help_choices_flag_state_and_aliases():
    colour, size = dataclasses.fields(_Section)
    assert colour.metadata == {"help": "A colour.", "choices": ("red", "blue"), "flag": None,
                               "state": True, "aliases": ()}
    assert (flag_name(colour), flag_name(size)) == ("colour", "size_px")
    assert size.metadata["aliases"] == ("old_size",) and not size.metadata["state"]


def test_choice_problems_name_each_field_outside_its_choices():
    assert choice_problems(_Section()) == []
    assert choice_problems(_Section(colour="green", size=99)) == [
        "colour must be one of ('red', 'blue'), not 'green'"]
