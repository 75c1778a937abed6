"""``python -m actorflow``: the ``actorflow`` command."""

from actorflow.cli import main

raise SystemExit(main())
