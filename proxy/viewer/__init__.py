"""The cassette viewer: read-only pages over a library (`tapeproxy view`, /__tapeproxy/ui/)."""
