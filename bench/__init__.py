"""Benchmarks: `bench_planner.py` (route planning) and `bench_invoke.py` (the invoke path), each
writing its own section of docs/benchmarks.md. Run them as scripts or with `python -m bench.…`."""
