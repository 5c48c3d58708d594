"""What runs around the server, not in it: setting up tritonserver (`tritonserver_setup`), the image (`container`),
the machine's tools (`tools`: apt, Java, the dependency audit, the GPU gate, BentoML's gRPC stubs) and the Kubernetes
manifests (`deploy`)."""
