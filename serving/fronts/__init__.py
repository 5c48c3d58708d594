"""The API dialects, each a thin adapter over the engine: BentoML HTTP and gRPC, BioNeMo gRPC, OpenAI."""
