"""actorflow's tests, laid out like the code: ``actors/``, ``storage/`` and ``runtime/``
test those packages, the front's tests (CLI, inspector, docs, packaging, fuzzing and
torture budgets) sit here, and ``support/`` holds what several of them share."""
