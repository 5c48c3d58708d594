"""Triton as the service sees it: the models it serves, the calls to them through the runner, its options."""
