"""What every front calls (engine.py's `Engine`): inputs in (inputs.py), results out (results.py), the request
limits enforced (limits.py); calling Triton's graphs (graphs.py), encoding, the protein language model and
generation, each a role of its own."""
