"""What a forked child must not use of its parent's: each holder forgets it there.

A child of ``fork()`` has only the forking thread. Actor threads, a renewer thread,
connections to a database and locks that other threads held at the fork are the
parent's; an object holding any of them registers here and its ``forget_parent()``
runs in the child right after the fork (``os.register_at_fork``), in the child's
one thread: it must not wait on anything, and makes anew what it needs.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["ForgetsParent", "forget_in_children"]


class ForgetsParent(Protocol):
    """An object that holds something a forked child must not use."""

    def forget_parent(self) -> None:
        """In a forked child, right after the fork (its only thread): let go of the parent's."""


_HOLDERS: weakref.WeakSet[ForgetsParent] = weakref.WeakSet()


def forget_in_children(holder: ForgetsParent) -> None:
    """Call ``holder.forget_parent()`` in every child forked from here on while it lives."""
    _HOLDERS.add(holder)


def _forget_parents() -> None:
    for holder in list(_HOLDERS):
        holder.forget_parent()


os.register_at_fork(after_in_child=_forget_parents)
