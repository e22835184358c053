"""Benchmarks: each ``ppl-tok bench <name>`` in its own module, measured as ratios against a baseline run in the same
process. Nothing below this package imports it."""
