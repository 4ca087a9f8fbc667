"""Benchmarks for the Events API: `make bench` (or `python -m bench`); see bench/README.md."""
