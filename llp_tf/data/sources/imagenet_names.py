"""Readable names of the ImageNet (ILSVRC-2012) classes, whose datasets name them by WordNet id.

``imagenet_class_names.tsv`` (package data) holds, per WordNet id in TFDS's class order, the
synset's WordNet lemmas ("n01440764<TAB>tench, Tinca tinca"); the readable name is the first
lemma, as in Keras' ``imagenet_class_index.json``.
"""

import functools
import os
from typing import Sequence

NAMES_FILE = os.path.join(os.path.dirname(__file__), "imagenet_class_names.tsv")


@functools.cache
def wordnet_lemmas() -> dict[str, str]:
    """{WordNet id: its lemmas, comma-separated} of the 1,000 ILSVRC-2012 classes."""
    with open(NAMES_FILE, encoding="utf-8") as f:
        return dict(line.rstrip("\n").split("\t", 1) for line in f if line.strip())


def readable_class_names(class_names: Sequence[str]) -> tuple[str, ...]:
    """``class_names`` with each ILSVRC-2012 WordNet id replaced by its first lemma ("tench").

    Names of other datasets come back unchanged, so a folder of images named by WordNet id
    reads as ImageNet's classes too.
    """
    lemmas = wordnet_lemmas()
    return tuple(lemmas[name].split(",")[0] if name in lemmas else name for name in class_names)
