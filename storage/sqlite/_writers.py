"""The queue in which one process's writers to one SQLite file take their turns.

SQLite leaves waiting for its one write lock to its busy handler, which sleeps and
tries again (after 1, 2, 5, ... then every 100 ms) and serves nobody in order: a
writer only wins if the lock happens to be free when it looks. While the writers
of a process also wait for the GIL, each holds the lock longer, and the others
almost never find it free: with 19 threads of one process saving in a loop beside
10 busy threads, lease grants bounded by 1 s failed 22 times out of 30; beside 20,
saves ran past their 30 s busy timeout (``database is locked``). Queued here
first, a process's writers reach SQLite one at a time, each in its turn, so the
busy handler is left only writers of other processes to wait for.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from pathlib import Path

__all__ = ["WriterQueue", "writer_queue"]


class WriterQueue:
    """A lock taken in the order it was asked for: released, it passes straight to the
    longest waiter (a thread that asks meanwhile cannot take it first). Not reentrant.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._taken = False
        self._waiters: deque[threading.Lock] = deque()
        self._handoffs = 0
        """How many times the lock changed hands: a waiter's sign that the queue moves."""

    def acquire(self, stall: float) -> bool:
        """Take the lock in turn; False if it stayed with one holder for ``stall`` seconds.

        A queue that keeps moving is waited out however long it is: only a holder
        that does not let go (stopped inside a transaction) is a reason to give up.
        """
        with self._mutex:
            if not self._taken:
                self._taken = True
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
            seen = self._handoffs
        try:
            while not turn.acquire(timeout=max(stall, 0.0)):
                with self._mutex:
                    if self._handoffs != seen:  # moving: wait on
                        seen = self._handoffs
                        continue
                    # Gone from the line: handed over between the timeout and here.
                    return not self._leave(turn)
        except BaseException:
            # Interrupted (Ctrl-C): leave the line, or pass on a turn already handed
            # over; a turn left in the line would be handed the lock and never let go.
            with self._mutex:
                left = self._leave(turn)
            if not left:
                self.release()
            raise
        return True

    def _leave(self, turn: threading.Lock) -> bool:
        """Take ``turn`` out of the line (under the mutex); False if it was handed the lock."""
        try:
            self._waiters.remove(turn)
        except ValueError:
            return False
        return True

    def release(self) -> None:
        """Hand the lock to the longest waiter, or leave it free."""
        with self._mutex:
            self._handoffs += 1
            if self._waiters:
                self._waiters.popleft().release()  # still taken: now by that waiter
            else:
                self._taken = False


_QUEUES: weakref.WeakValueDictionary[tuple[int, int], WriterQueue] = weakref.WeakValueDictionary()
_QUEUES_LOCK = threading.Lock()


def _forget_queues() -> None:
    """In a forked child: the parent's queues may be held by threads that do not exist
    here, which would never hand them on; the child's writers queue anew."""
    global _QUEUES, _QUEUES_LOCK  # noqa: PLW0603 - the registry is the process's
    _QUEUES = weakref.WeakValueDictionary()
    _QUEUES_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_queues)


def writer_queue(path: Path) -> WriterQueue:
    """The queue of the file at ``path`` (which exists), shared by every store of this
    process open on it (keyed by device and inode: any path to the same file)."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino)
    with _QUEUES_LOCK:
        queue = _QUEUES.get(key)
        if queue is None:
            queue = _QUEUES[key] = WriterQueue()
        return queue
