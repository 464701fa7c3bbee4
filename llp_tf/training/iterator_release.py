"""Spent input iterators deleted off the training thread.

Deleting a distributed iterator can block until the autotuning thread of a per-device
prefetching iterator wakes for its next round, which comes less often the longer the
iterator has read: up to a minute (docs/performance.md). The wait does not hold Python's
GIL, so `release` deletes on a thread of its own while training goes on.
"""

import threading


def release(references: list) -> threading.Thread:
    """Empties ``references`` on a new thread, started and returned: the caller moves its last
    references to spent iterators into the list, and that thread deletes them. The thread is
    not a daemon: at exit the interpreter waits for it, as it would have for the deletion."""
    thread = threading.Thread(target=references.clear, name="release_iterators")
    thread.start()
    return thread
