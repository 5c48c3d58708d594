"""BioNeMo 1.x's gRPC dialect: its `GenerativeSampler` services (protos/) over the engine, on `bentoml serve-grpc`."""
