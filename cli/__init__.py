"""llmtape's command line."""
