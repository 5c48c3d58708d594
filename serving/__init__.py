"""The service's logic, wired together by `service.py`, in one folder per role:

- `fronts/`: one folder per API dialect over the engine (the native API, OpenAI's, BioNeMo's gRPC), and the BentoML
  transport they share (IO descriptors, endpoint registration, /schema.json, the gRPC interceptor and stubs);
- `engine/`: what every front calls: its inputs and results, the request limits, the calls to Triton's graphs,
  encoding, the protein language model, generation (next-token choice, decode batching);
- `triton/`: the models Triton serves, the calls to it through the runner, tritonserver's options;
- `startup/`: settings, the launcher, the runtime each graph runs on this machine.

`errors.py` (typed errors, their HTTP statuses and gRPC codes) and `metrics.py` are shared by all of them.
"""
