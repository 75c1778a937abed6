"""``python -m actorflow.cli``: the ``actorflow`` command, as ``python -m actorflow`` runs it."""

from actorflow.cli import main

raise SystemExit(main())
