"""`python -m tapeproxy ARGS` is `tapeproxy ARGS`."""

from tapeproxy.cli.main import app

app(prog_name="tapeproxy")
