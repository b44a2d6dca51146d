"""Test doubles for llmtape: a fake LLM upstream speaking the providers' wire formats."""
