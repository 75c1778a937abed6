"""Tests of ``actorflow.storage``: the record format, each store, the conformance kit."""
