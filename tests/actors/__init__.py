"""Tests of ``actorflow.actors``: the codec, the actor plumbing, chunked state, Ray."""
