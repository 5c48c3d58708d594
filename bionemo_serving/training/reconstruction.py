"""Progress a run can show without a test split: greedy decoding of train molecules it never trained on.

Decoding follows the service (bionemo_serving/engine/generation.py): the encoder's output, with Gaussian noise of
`scaled_radius` added at every real position for /generate, decoded greedily from `^` up to `&`.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import MBartForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from bionemo_serving.preprocessing.smiles import SmilesTokenizer, canonical_smiles

EVAL_BATCH = 100
SAMPLING_RADIUS = 1.0
"""The fronts' default scaled_radius (/generate, /molmim/sampling): the noise a run's evaluation samples at."""


@torch.inference_mode()
def decode(
    model: MBartForConditionalGeneration,
    smiles: list[str],
    tokenizer: SmilesTokenizer,
    scaled_radius: float,
    max_new_tokens: int,
    seed: int = 0,
    batch_size: int = EVAL_BATCH,
) -> list[str]:
    """Each molecule encoded, its latent perturbed by noise of `scaled_radius` (0: none), decoded greedily,
    `batch_size` molecules a call."""
    device = model.device
    rng = np.random.default_rng(seed)
    decoded = []
    for start in range(0, len(smiles), batch_size):
        batch = tokenizer.pad([tokenizer.encode(molecule) for molecule in smiles[start : start + batch_size]])
        ids, mask = torch.from_numpy(batch.input_ids).to(device), torch.from_numpy(batch.attention_mask).to(device)
        states = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        noise = rng.standard_normal(tuple(states.shape)).astype(np.float32) * np.float32(scaled_radius)
        latents = (states + torch.from_numpy(noise).to(device)) * mask[:, :, None]
        output = model.generate(
            encoder_outputs=BaseModelOutput(last_hidden_state=latents),
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
        )
        decoded += [tokenizer.decode(row) for row in output.cpu().numpy()]
    return decoded


def reconstruction_report(
    model: MBartForConditionalGeneration,
    smiles: list[str],
    tokenizer: SmilesTokenizer,
    scaled_radius: float,
    max_new_tokens: int,
) -> dict[str, object]:
    """How many molecules come back exactly (RDKit-canonical match) from their own latent, and what noise of
    `scaled_radius` (/generate's default perturbation) makes of them: valid molecules, and how many new ones."""
    was_training = model.training
    model.eval()
    seeds = [canonical_smiles(molecule) for molecule in smiles]
    greedy = [canonical_smiles(molecule) for molecule in decode(model, smiles, tokenizer, 0.0, max_new_tokens)]
    noised = [
        canonical_smiles(molecule) for molecule in decode(model, smiles, tokenizer, scaled_radius, max_new_tokens)
    ]
    model.train(was_training)
    valid_noised = [molecule for molecule in noised if molecule is not None]
    return {
        "molecules": len(smiles),
        "reconstructed": sum(seed == molecule for seed, molecule in zip(seeds, greedy)),
        "valid": sum(molecule is not None for molecule in greedy),
        "noised": {
            "scaled_radius": scaled_radius,
            "valid": len(valid_noised),
            "new": sum(molecule is not None and molecule != seed for seed, molecule in zip(seeds, noised)),
            "unique_valid": len(set(valid_noised)),
        },
    }
