"""The cassette tools (ls, show, diff, verify, rekey, prune, redact, prices), via the store."""
