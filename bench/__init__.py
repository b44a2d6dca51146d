"""The tapeproxy benchmark: run with `.venv/bin/python bench/run.py [--quick]`."""
