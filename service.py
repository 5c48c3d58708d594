"""BentoML front of the BioNeMo Triton models: validate, tokenize, call Triton, post-process.

Wiring only: the settings, the Triton runner, the BentoML service with its middlewares and gRPC interceptor,
admission, the model registry and the engine; then each API dialect's front is mounted on them
(bionemo_serving/fronts/). The logic lives in `bionemo_serving/`, the tokenizers in `bionemo_serving/preprocessing/`.
Run with `make serve`, or `python -m bionemo_serving.startup.launch service:svc` with
`tritonserver` on PATH; the settings (bionemo_serving/startup/settings.py) come from the environment.
"""

from __future__ import annotations

import bentoml

import bionemo_serving.fronts.bentoml.grpc_stubs  # noqa: F401  (before any use of BentoML's gRPC stubs: the ones for protobuf 6)
from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.limits import RequestLimits
from bionemo_serving.engine.scheduler import Scheduler, plan_board
from bionemo_serving.fronts.admission import Admission
from bionemo_serving.fronts.bentoml.endpoints import Endpoints
from bionemo_serving.fronts.bentoml.grpc_server import ServiceErrorInterceptor, serve_on_uvloop
from bionemo_serving.fronts.bentoml.schema import ServesSchemaJSON
from bionemo_serving.fronts.bentoml.server_timing import ServerTiming
from bionemo_serving.fronts.bionemo_grpc import servicers as bionemo_grpc
from bionemo_serving.fronts.dataframe import routes as dataframe_api
from bionemo_serving.fronts.molmim import routes as molmim_api
from bionemo_serving.fronts.native import routes as native_api
from bionemo_serving.fronts.openai import routes as openai_api
from bionemo_serving.fronts.bentoml.triton_metrics import MergeTritonMetrics
from bionemo_serving.startup.command_lines import triton_arguments
from bionemo_serving.startup.settings import current_settings
from bionemo_serving.triton.registry import ModelRegistry

settings = current_settings()
serve_on_uvloop()
triton = bentoml.triton.Runner(
    "triton",
    model_repository=settings.model_repository,
    # http binds tritonserver to 127.0.0.1 (grpc would bind 0.0.0.0).
    tritonserver_type="http",
    cli_args=triton_arguments(settings),
)
# The runner appends its own --log-verbose after cli_args, and tritonserver keeps the last one.
triton.cli_args.append(f"--log-verbose={settings.triton_log_verbose}")
svc = bentoml.legacy.Service("bionemo", runners=[triton])
svc.add_asgi_middleware(ServerTiming)  # first, so outermost of these: `Server-Timing` on every HTTP answer
svc.add_asgi_middleware(MergeTritonMetrics, port=settings.triton_metrics_port)  # Triton's families in GET /metrics
svc.add_grpc_interceptor(ServiceErrorInterceptor)  # `bentoml serve-grpc`: typed errors as gRPC codes
svc.add_asgi_middleware(ServesSchemaJSON, service=svc)  # GET /schema.json, for bentoml.SyncHTTPClient/AsyncHTTPClient
admission = Admission(settings.max_in_flight, settings.request_timeout_s, http_request=lambda: svc.context.request)
registry = ModelRegistry(triton)
limits = RequestLimits(
    settings.max_sequences_per_request, settings.max_score_passes, settings.max_request_bytes, settings.request_timeout_s
)
# the API workers plan with each other's work in view
scheduler = Scheduler(settings.max_running, settings.request_timeout_s, board=plan_board)
engine = Engine(triton, registry, limits, scheduler)

endpoint = Endpoints(svc, admission)
native_api.mount(endpoint, engine, registry, settings.max_request_bytes)
openai_api.mount(endpoint, engine, registry, settings.max_request_bytes)
molmim_api.mount(endpoint, engine, settings.max_request_bytes)  # MolMIM's NIM API under /molmim/
dataframe_api.mount(endpoint, engine, settings.max_request_bytes)  # tables: bentoml.batch.run_in_spark
# The admin endpoints exist only when BIONEMO_ADMIN_TOKEN is set, and answer 401 without it.
if settings.admin_token is not None:
    native_api.mount_admin(endpoint, registry, limits, settings.admin_token)
bionemo_grpc.mount(svc, engine, admission, settings.esm1nv_grpc_model)  # BioNeMo 1.x's gRPC services
