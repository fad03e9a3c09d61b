"""Temporal workflows. Deterministic and side-effect free: all I/O happens in activities."""
