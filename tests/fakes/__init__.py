"""Test doubles for tapeproxy: a fake LLM upstream speaking the providers' wire formats."""
