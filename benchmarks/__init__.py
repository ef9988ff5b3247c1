"""Benchmark harness: plain scripts that write JSON lines; `python -m benchmarks` runs all of them."""
