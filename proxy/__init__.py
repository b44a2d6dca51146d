"""llmtape's server: routing, forwarding, recording, matching, replay and the cassette store."""
