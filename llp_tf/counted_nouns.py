"""Numbers that agree with their nouns in messages ("1 epoch", "epochs 1-3"), and long
lists cut short ("a, b and 3 more"). Imports only the standard library."""

from collections.abc import Iterable


def plural(noun: str) -> str:
    """The plural of a noun phrase by its last word's commonest rule ("class" -> "classes")."""
    if noun.endswith(("s", "x", "z")):
        return noun + "es"
    return noun + "s"


def counted(count: int, noun: str, plural_form: str | None = None) -> str:
    """"1 epoch", "40 training examples"; ``plural_form`` where `plural` gets it wrong."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural_form or plural(noun)}"


def numbered_range(noun: str, first: int, last: int, plural_form: str | None = None) -> str:
    """"epochs 1-3", or "epoch 3" when ``first`` and ``last`` are the same."""
    if first == last:
        return f"{noun} {first}"
    return f"{plural_form or plural(noun)} {first}-{last}"


def listed(names: Iterable[str], shown: int = 4) -> str:
    """The first ``shown`` of ``names`` and how many more: "config.json, split.npz and 3 more"."""
    names = list(names)
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"
