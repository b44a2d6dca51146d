"""The record/replay engine: a request in, an answer out; no web framework in it."""
