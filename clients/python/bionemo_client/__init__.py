"""A client for the BioNeMo serving API: files of proteins or SMILES in, Parquet, CSV or .npz out, at any size.

The CLI is `bionemo-client` (cli.py); the Python API is `Client` (client.py). Neither needs the server's packages.
"""

from bionemo_client.client import Client
from bionemo_client.jobs import JobFailed, Summary
from bionemo_client.records import InputError
from bionemo_client.service import ServiceError

__all__ = ["Client", "InputError", "JobFailed", "ServiceError", "Summary"]
