"""tapeproxy: a local record/replay proxy for LLM and HTTP APIs, with content-addressed cassettes.

Installed as this one package, built from the repository's `proxy/` (the server) and `cli/`
(the command line, as `tapeproxy.cli`)."""

__version__ = "0.2.0"
