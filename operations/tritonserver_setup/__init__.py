"""Make a working `tritonserver` available on the virtual environment's PATH."""
