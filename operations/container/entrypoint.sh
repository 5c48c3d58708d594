#!/usr/bin/env bash
# The image's entrypoint (set by operations/container/Dockerfile.template).
#   docker run IMAGE serve [--triton-options KEY=VALUE]... [bentoml serve options]
#   docker run IMAGE serve-grpc [--triton-options KEY=VALUE]... [bentoml serve-grpc options]
# starts the service (HTTP, or BentoML's gRPC server) through bionemo_serving.startup.launch, which
# turns --triton-options into tritonserver arguments (bentoml serve no longer takes
# them) and checks every BIONEMO_* setting first. Any other command goes to
# BentoML's own entrypoint.
set -Eeuo pipefail

if [ "$#" -eq 0 ] || [ "$1" = serve ]; then
    [ "$#" -gt 0 ] && shift
    cd "$BENTO_PATH/src"
    exec python -m bionemo_serving.startup.launch "$BENTO_PATH" "$@"
fi
if [ "$1" = serve-grpc ]; then
    shift
    cd "$BENTO_PATH/src"
    exec python -m bionemo_serving.startup.launch --grpc "$BENTO_PATH" "$@"
fi
exec "$BENTO_PATH/env/docker/entrypoint.sh" "$@"
