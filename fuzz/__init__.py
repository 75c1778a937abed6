"""actorflow's own fuzzing: hostile bytes for every decoder and every store's on-disk form.

Run it with ``make fuzz`` (long) or ``python -m fuzz.run --seconds 2`` (bounded; the
test suite does this for every target). See ``docs/fuzzing.md``.

- :mod:`fuzz._guard`: what counts as a failure while untrusted bytes are decoded
  (an exception outside ``ActorflowError``, any import, exec or subprocess, code of
  a planted package running, a run over the time limit, running out of memory).
- :mod:`fuzz._values` and :mod:`fuzz._mutate`: structure-aware inputs: valid values
  of every wire type, encoded, then mutated as msgpack trees (ext payloads included)
  and as bytes.
- :mod:`fuzz.targets`: the decoders (wire, snapshot, record, runtime field).
- :mod:`fuzz.stores`: one small adapter per store (build an image, damage its
  on-disk form, open it); adding a store is adding an adapter.
- :mod:`fuzz.run`: the driver: one worker process per target under a watchdog,
  a report of inputs tried and failures by kind, failing inputs saved under
  ``tests/fuzz_corpus/<target>/`` where ``tests/test_fuzz.py`` replays them.
"""
