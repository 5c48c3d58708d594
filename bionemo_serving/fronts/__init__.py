"""The API dialects, each a thin adapter over the engine that renders its results: the native API (native/),
OpenAI's (openai/), BioNeMo's gRPC (bionemo_grpc/), tables for Spark (dataframe/); the BentoML transport they share
(bentoml/), admission, and the float arrays of JSON answers (array_encoding.py)."""
