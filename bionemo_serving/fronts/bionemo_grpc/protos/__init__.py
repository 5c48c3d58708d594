"""BioNeMo 1.x's gRPC protocols (the .proto files) and the stubs `python -m operations.tools.grpc_stubs` generates from them."""
