"""The doors onto the engine: the ASGI front, the control API, answers sent over ASGI."""
