"""The service's logic, kept apart from the BentoML router in `service.py`."""
