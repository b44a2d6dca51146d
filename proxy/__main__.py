"""`python -m llmtape ARGS` is `llmtape ARGS`."""

from llmtape.cli.main import app

app(prog_name="llmtape")
