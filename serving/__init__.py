"""The service's logic, kept apart from the BentoML router in `service.py`, in one folder per role:

- `fronts/`: one adapter per API dialect over the engine (BentoML's HTTP and gRPC, BioNeMo's gRPC, OpenAI's);
- `engine/`: tokenize, run the graphs, post-process (encoding, generation, decode batching);
- `triton/`: the models Triton serves, the calls to it through the runner, tritonserver's options;
- `startup/`: settings, the launcher, the runtime each graph runs on this machine.

`protocol.py` (the request and response types), `errors.py` (typed errors and their statuses) and `metrics.py`
are shared by all of them.
"""
