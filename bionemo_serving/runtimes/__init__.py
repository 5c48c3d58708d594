"""The CPU runtimes, the Triton python backends that run them, and the choice of runtime on the serving machine.

The exporter writes each graph once per runtime it can convert it for (onnxruntime, with and without fused
attention, TorchScript, OpenVINO); which is fastest depends on the CPU, so each machine that serves times them.
Its layers, bottom first (tests/unit/test_import_layers.py holds them):

- `engines.py`: each runtime's engine, the arena, the core share, runs in pieces. It imports nothing of this project:
  the exporter copies it as `engines.py` beside each python backend in the model repository, where Triton's
  python-backend stub runs with nothing else of the project installed.
- `backends/`: the python backends the exporter copies as each version's `model.py` (model_catalog.Backend names
  them): `stateless_graph.py` runs one graph, `stateful_decoder.py` keeps each row's key-value cache. They import
  the engines flat, `from engines import ...`.
- `step_caches.py`: the decoder step's per-layer cache inputs by name (numpy only), shared by the exporter's traced
  inputs and the timings.
- `choice.py`: the timings on this machine, their record (runtime.json) and the choice, `python -m bionemo_serving.runtimes.choice`;
  `served_repository.py`: the folder a start serves, each timed graph's config naming its chosen runtime, and the
  copies of a model's `model.weights` linked again (`relink`). They read
  what to time from the graphs' configs, which the exporter writes, so that the whole package sits below the model
  catalog (model_catalog.py imports `Arena` and the backends' names from here).
"""
