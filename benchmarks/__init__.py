"""Load tests and benchmarks; `make bench` runs `python -m benchmarks.run`."""
