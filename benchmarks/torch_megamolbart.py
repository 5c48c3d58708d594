"""The same megamolbart weights in transformers, as a user without Triton would generate molecules (/generate's contender).

One `generate` call per request: transformers' greedy decoding with its
key-value cache, from the seed's encoder states perturbed exactly as the
service perturbs them (same noise for the same seed), so the answers can be
compared molecule for molecule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import MBartForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from bionemo_serving.model_catalog import MODELS
from bionemo_serving.preprocessing import SmilesTokenizer
from bionemo_serving.preprocessing.smiles import canonical_smiles, tanimoto_similarity
from bionemo_serving.fronts.native.protocol import GenerateRequest

CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "megamolbart"


class TorchGenerator:
    def __init__(self, checkpoint: Path = CHECKPOINT) -> None:
        self.model = MBartForConditionalGeneration.from_pretrained(checkpoint).eval()
        self.tokenizer = SmilesTokenizer(MODELS["megamolbart"].max_length)

    @torch.inference_mode()
    def generate(self, request: GenerateRequest) -> dict[str, object]:
        """The service's /generate answer for greedy decoding, from transformers' `generate`."""
        batch = self.tokenizer.pad([self.tokenizer.encode(smiles) for smiles in request.smiles])
        ids, mask = torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask)
        states = self.model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
        states = np.repeat(states, request.num_samples, axis=0)
        mask = mask.repeat_interleave(request.num_samples, dim=0)
        noise = np.random.default_rng(request.seed).standard_normal(states.shape).astype(np.float32)
        latents = torch.from_numpy(states + noise * np.float32(request.scaled_radius)) * mask[:, :, None]
        output = self.model.generate(
            encoder_outputs=BaseModelOutput(last_hidden_state=latents),
            attention_mask=mask,
            max_new_tokens=request.max_length,
            do_sample=False,
            num_beams=1,
        )
        generated = [self.tokenizer.decode(row) for row in output.numpy()]
        results = []
        for index, seed_smiles in enumerate(request.smiles):
            samples = generated[index * request.num_samples : (index + 1) * request.num_samples]
            molecules = [
                {"smiles": smiles, "canonical": canonical, "valid": canonical is not None,
                 "tanimoto": tanimoto_similarity(smiles, seed_smiles) if canonical is not None else None}
                for smiles, canonical in ((smiles, canonical_smiles(smiles)) for smiles in samples)
            ]  # fmt: skip
            results.append({"seed_smiles": seed_smiles, "samples": molecules})
        return {"model": "megamolbart", "seed": request.seed, "results": results}
