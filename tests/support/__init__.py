"""Shared test helpers: a fake of the Triton runner for unit tests of the engine (fake_runner.py), and the service's
routes run in-process over it (routes.py)."""
