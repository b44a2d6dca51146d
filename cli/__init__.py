"""tapeproxy's command line."""
