"""The actorflow demo: SQLite checkpoints, a supervised restart, a SIGKILL, a resume.

The demo's code ships inside the package (``actorflow/_demo.py``), so that
``actorflow demo`` works from a plain ``pip install``; this runs the same thing.
"""

from __future__ import annotations

from actorflow._demo import main

if __name__ == "__main__":
    main()
