"""BioNeMo serving: the service's logic, wired together by `service.py`, in one folder per role:

- `model_catalog.py`: one description per model, which drives the exporter, the generated configs and the service;
- `fronts/`: one folder per API dialect over the engine (the native API, OpenAI's, MolMIM's, BioNeMo's gRPC, the
  DataFrame front), and the BentoML transport they share (IO descriptors, endpoint registration, /schema.json, the
  gRPC interceptor and stubs);
- `engine/`: what every front calls: its inputs and results, the request limits, admission, the calls to Triton's
  graphs, encoding, the protein language model, generation and CMA-ES optimization;
- `triton/`: the models Triton serves, the calls to it through the runner, tritonserver's options;
- `startup/`: settings, the launcher, readiness;
- `preprocessing/`: tokenizers, vocabularies, RDKit's checks and the molecule properties;
- `exporter/`, `runtimes/`: checkpoints to graphs, and what runs each graph (the python backends) on this machine;
- `training/`: trains the molecule default (not in the bento).

`errors.py` (typed errors, their HTTP statuses and gRPC codes) and `metrics.py` are shared by all of them.
"""
