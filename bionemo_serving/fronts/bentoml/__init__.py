"""BentoML's transport, shared by the API dialects served through it: the IO descriptors that validate bodies and
render typed errors, endpoint registration, GET /schema.json for its new-style clients, and what `serve-grpc` needs
(the error interceptor, uvloop, its gRPC stubs for protobuf 6, answers as protobuf Values)."""
