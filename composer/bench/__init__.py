"""Benchmarks run with `python -m composer bench NAME [ARGS ...]`."""
