"""Checks run from the checkout, not installed with the service; `make audit` runs `python -m tools.dependency_audit`."""
