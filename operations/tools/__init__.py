"""Checks run from the checkout, not installed with the service; `make audit` runs `python -m operations.tools.dependency_audit`."""
