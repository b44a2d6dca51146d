"""Calling upstreams: the aiohttp client, bounded inflate, which headers pass."""
