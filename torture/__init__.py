"""The torture harness: random workflows under random faults, crashes and concurrency.

Every trial is drawn from a name (``store:seed``, or ``store:seed:ray``): a workflow
from a small grammar (:mod:`torture.grammar`, executors in :mod:`torture.flows`), a
plan of faults, kills and concurrency (:mod:`torture.trial`), run in processes of its
own (:mod:`torture.child`) on a real store (:mod:`torture.stores`). The oracle is the
fault-free run of the same workflow; what a trial left is compared with it
(:mod:`torture.observe`). :mod:`torture.run` is the command line; ``make torture``
runs it as long as asked, ``make test`` a fixed budget (``tests/test_torture.py``).
See ``docs/torture.md``.
"""
