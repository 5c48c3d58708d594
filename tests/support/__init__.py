"""Shared test helpers: a fake of the Triton runner for unit tests of the engine (fake_runner.py), and the engine and
the service's routes run in-process over it (in_process.py)."""
