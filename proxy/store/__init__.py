"""Cassette storage: the CassetteStore protocol and its filesystem implementation."""
