"""The independent reference: transformers models and tokenizers loaded from the same checkpoint folders."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, EsmModel, MBartForConditionalGeneration, T5EncoderModel
from transformers.modeling_outputs import BaseModelOutput

from model_catalog import MODELS, Architecture
from preprocessing.decoding import BeamSearch, log_softmax
from preprocessing.smiles import SmilesTokenizer

CHECKPOINTS = Path(__file__).resolve().parent.parent / "checkpoints"


class TransformersReference:
    """One sequence at a time, no padding: nothing shared with the service's code path."""

    def __init__(self, model_name: str, folder: Path | None = None) -> None:
        self.folder = folder or CHECKPOINTS / model_name
        self.architecture = MODELS[model_name].architecture

    @cached_property
    def model(self) -> torch.nn.Module:
        """The encoder (for MegaMolBART, the encoder of the whole seq2seq model in `seq2seq`)."""
        if self.architecture is Architecture.T5_ENCODER:
            return T5EncoderModel.from_pretrained(self.folder).eval()
        if self.architecture is Architecture.MBART:
            return self.seq2seq.get_encoder()
        return EsmModel.from_pretrained(self.folder, add_pooling_layer=False).eval()

    @cached_property
    def seq2seq(self) -> MBartForConditionalGeneration:
        return MBartForConditionalGeneration.from_pretrained(self.folder).eval()

    def greedy(self, hiddens: np.ndarray, mask: np.ndarray, max_new_tokens: int) -> list[list[int]]:
        """transformers' own greedy `generate` from given encoder states."""
        with torch.inference_mode():
            output = self.seq2seq.generate(
                encoder_outputs=BaseModelOutput(last_hidden_state=torch.from_numpy(hiddens)),
                attention_mask=torch.from_numpy(mask),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
            )
        return output.tolist()

    def beam_search(self, hiddens: np.ndarray, mask: np.ndarray, beam_size: int, max_steps: int) -> list[list[int]]:
        """preprocessing's BeamSearch over transformers' logits of whole prefixes, no key-value cache: each
        hypothesis decoded from scratch at every step, so that nothing is shared with the service's caches."""
        results = []
        for row in range(len(hiddens)):
            search = BeamSearch(beam_size, self.seq2seq.config.decoder_start_token_id, self.seq2seq.config.eos_token_id)
            for _ in range(max_steps):
                if search.done:
                    break
                prefixes = torch.tensor([ids for ids, _ in search.live])
                states = torch.from_numpy(hiddens[row : row + 1]).expand(len(prefixes), -1, -1)
                with torch.inference_mode():
                    logits = self.seq2seq(
                        encoder_outputs=BaseModelOutput(last_hidden_state=states),
                        attention_mask=torch.from_numpy(mask[row : row + 1]).expand(len(prefixes), -1),
                        decoder_input_ids=prefixes,
                    ).logits[:, -1]
                search.step(log_softmax(logits.numpy()))
            results.append(search.best())
        return results

    @cached_property
    def tokenizer(self):  # noqa: ANN201 - a transformers tokenizer
        return AutoTokenizer.from_pretrained(self.folder)

    @property
    def residues(self) -> slice:
        """Residue positions among the tokens: ESM wraps them in <cls> ... <eos>, ProtT5 ends with </s>,
        MegaMolBART's encoder reads SMILES tokens alone."""
        return {Architecture.T5_ENCODER: slice(0, -1), Architecture.MBART: slice(None)}.get(self.architecture, slice(1, -1))

    def hidden_states(self, sequence: str) -> np.ndarray:
        """[tokens, dim] final hidden states of one unpadded sequence."""
        if self.architecture is Architecture.MBART:  # no transformers tokenizer exists for MegaMolBART
            ids = torch.from_numpy(SmilesTokenizer(max_tokens=10**6).encode(sequence))[None]
            tokens = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        elif self.architecture is Architecture.T5_ENCODER:
            text = " ".join("X" if residue in "UZOB" else residue for residue in sequence.upper())
            tokens = self.tokenizer(text, return_tensors="pt")
        else:
            tokens = self.tokenizer(sequence.upper(), return_tensors="pt")
        with torch.inference_mode():
            return self.model(**tokens).last_hidden_state[0].numpy()

    def mean_embedding(self, sequence: str) -> np.ndarray:
        return self.hidden_states(sequence)[self.residues].mean(axis=0)
