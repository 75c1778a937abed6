"""actorflow benchmark suite: see ``bench/README.md``; run with ``python bench/run_all.py``."""
