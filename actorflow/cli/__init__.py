"""The ``actorflow`` command: inspect checkpoint stores, draw graphs, run the demo.

``STORE`` is a SQLite file (``SQLiteStore``), a folder (``FileStore``), or a
PostgreSQL URI (``PostgresStore``, extra ``actorflow[postgres]``:
``postgresql://user@host/db``, with ``?schema=NAME`` for a schema other than
``actorflow``); every command opens it with :func:`open_store`, and no command
creates a file, a folder or a schema (stores open with ``create=False``).

    actorflow checkpoints list STORE [--session S] [--workflow W]
    actorflow checkpoints show STORE CHECKPOINT_ID [--decode] [--import MODULE]
    actorflow checkpoints verify STORE
    actorflow checkpoints prune STORE --session S --keep N
    actorflow checkpoints prune STORE --older-than AGE [--whole-sessions]   (AGE: 90s, 30m, 12h, 7d, 2w)
    actorflow checkpoints upgrade STORE
    actorflow graph MODULE:ATTRIBUTE [--format mermaid|dot]
    actorflow ui STORE [--workflow MODULE:ATTRIBUTE] [--port N]
    actorflow serve MODULE:ATTRIBUTE --store STORE [--host H] [--port N] [--token T]
    actorflow demo

Also ``python -m actorflow``. A mistake (a missing store, a bad graph target) is one
line on stderr and exit status 2; Ctrl-C is one line and exit status 130. The user's
modules (``--import MODULE``, ``MODULE:ATTRIBUTE``) are imported with the current
folder first on the path, as ``python -m`` has it, whichever command names them.

Where things are. One module per command, named by it: ``_checkpoints`` (all the
``checkpoints`` actions), ``_graph``, ``_ui``, ``_serve``, ``_demo``; each has a
``register(commands)`` that adds its parser and sets ``func``, the function that runs
it and returns the exit status. What the commands share is named by what it does:
``_stores`` (``open_store``: the store a ``STORE`` names), ``_workflows``
(``import_user_module``, the one rule for importing the user's code, and
``load_workflow``: the Workflow a ``MODULE:ATTRIBUTE`` names), ``_describe`` (what
``checkpoints show`` prints about a record), ``_usage`` (``Usage``, a mistake on the
command line). ``_main`` builds the parser from the commands and dispatches. A new
command is a new ``_<command>.py`` with its ``register``, called from ``_main.main``.
"""

from ._main import main
from ._stores import open_store

__all__ = ["main", "open_store"]
