"""The forward proxy: its door, its run-scoped CA, the hosts it intercepts, its tunnels."""
