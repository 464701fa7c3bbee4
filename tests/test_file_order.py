"""tests/file_order.py: whole files, longest first, a file's slow part counted only when
its slow tests run; files it does not list keep their order after the others."""

import pytest

from tests import file_order


class _Item:
    def __init__(self, nodeid, slow=False):
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name):
        return object() if name == "slow" and self.slow else None


@pytest.fixture
def seconds(monkeypatch):
    table = {"a.py": (10, 0), "b.py": (1, 100), "c.py": (5, 0)}
    monkeypatch.setattr(file_order, "SECONDS", table)


def _files(items):
    return [item.nodeid for item in items]


def test_files_run_longest_first_and_unlisted_ones_last_in_their_order(seconds):
    items = [_Item("z.py::t"), _Item("c.py::t"), _Item("b.py::t1"), _Item("y.py::t"),
             _Item("a.py::t"), _Item("b.py::t2", slow=True)]
    file_order.longest_first(items)
    assert _files(items) == ["b.py::t1", "b.py::t2", "a.py::t", "c.py::t", "z.py::t", "y.py::t"]


def test_a_files_slow_part_counts_only_when_its_slow_tests_are_selected(seconds):
    items = [_Item("b.py::t1"), _Item("c.py::t"), _Item("a.py::t")]
    file_order.longest_first(items)
    assert _files(items) == ["a.py::t", "c.py::t", "b.py::t1"]
