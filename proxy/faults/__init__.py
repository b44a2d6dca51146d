"""Faults: some requests answered with a provider's failure (a 429, an overload, a cut stream,
a dropped connection) instead of their answer, reproducibly, over replayed and live answers."""
