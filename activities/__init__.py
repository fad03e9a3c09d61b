"""Temporal activities: the I/O steps workflows call (store writes, provider calls, probes)."""
