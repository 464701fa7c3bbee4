"""Fixture results made once for all the pytest-xdist workers of a test run (a
training run, an export), where each worker would otherwise make its own."""

import fcntl
import json
import os


def shared_folder(tmp_path_factory, name):
    """The folder `shared` makes ``name`` in: in the run's base temporary
    directory, above each worker's."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    return root / f"shared-{name}"


def shared(tmp_path_factory, name, make):
    """``make(folder)``'s result (JSON): the first worker to ask makes it in
    `shared_folder`, under a lock the others wait on, and they read it."""
    folder = shared_folder(tmp_path_factory, name)
    done = folder.with_suffix(".json")
    with open(folder.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            folder.mkdir(exist_ok=True)
            done.write_text(json.dumps(make(folder)))
        return json.loads(done.read_text())
