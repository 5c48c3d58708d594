"""Training the served models' default checkpoints from public data (today: MegaMolBART on MOSES train).

Nothing here runs in the service: it writes a checkpoint folder that `python -m bionemo_serving.exporter` takes as any other.
"""
