"""A mistake on the command line, which every command may raise."""

from __future__ import annotations

__all__ = ["Usage"]


class Usage(Exception):
    """A mistake on the command line: printed as one line, exit status 2."""
