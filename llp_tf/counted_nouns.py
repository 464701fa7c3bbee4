"""Numbers that agree with their nouns in messages: "1 epoch", "3 epochs",
"epoch 2", "epochs 1-3"; and long lists of names cut short, "a, b and 3 more".
Imports only the standard library, so tools and error paths can use it.
"""

from collections.abc import Iterable


def plural(noun: str) -> str:
    """The plural of an English noun phrase by its last word's commonest rule:
    "epoch" -> "epochs", "class" -> "classes", "bank row" -> "bank rows" (not
    "batch" -> "batches": give such plurals to `counted` yourself)."""
    if noun.endswith(("s", "x", "z")):
        return noun + "es"
    return noun + "s"


def counted(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun`` in the number it takes: "1 epoch", "0 epochs",
    "40 training examples". ``plural_form`` for a noun `plural` gets wrong."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural_form or plural(noun)}"


def numbered_range(noun: str, first: int, last: int, plural_form: str | None = None) -> str:
    """Items ``first`` to ``last`` (inclusive) by number: "epochs 1-3", or
    "epoch 3" when both ends are the same."""
    if first == last:
        return f"{noun} {first}"
    return f"{plural_form or plural(noun)} {first}-{last}"


def listed(names: Iterable[str], shown: int = 4) -> str:
    """The first ``shown`` of ``names`` joined by commas, and how many more:
    "config.json, checkpoints, split.npz and 3 more"."""
    names = list(names)
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"
