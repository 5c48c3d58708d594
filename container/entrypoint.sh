#!/usr/bin/env bash
# The image's entrypoint (set by container/Dockerfile.template).
#   docker run IMAGE serve [--triton-options KEY=VALUE]... [bentoml serve options]
# starts the service through serving.launch, which turns --triton-options into
# tritonserver arguments (bentoml serve no longer takes them) and checks every
# BIONEMO_* setting first. Any other command goes to BentoML's own entrypoint.
set -Eeuo pipefail

if [ "$#" -eq 0 ] || [ "$1" = serve ]; then
    [ "$#" -gt 0 ] && shift
    cd "$BENTO_PATH/src"
    exec python -m serving.launch "$BENTO_PATH" "$@"
fi
exec "$BENTO_PATH/env/docker/entrypoint.sh" "$@"
