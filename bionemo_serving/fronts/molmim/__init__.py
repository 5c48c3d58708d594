"""MolMIM's NIM API as a dialect of this service: its types (protocol.py) and routes (routes.py)."""
