"""The independent reference: transformers models and tokenizers loaded from the same checkpoint folders."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, EsmForMaskedLM, EsmModel, MBartForConditionalGeneration, T5EncoderModel
from transformers.modeling_outputs import BaseModelOutput

from bionemo_serving.model_catalog import MODELS, Architecture
from bionemo_serving.engine.next_token import BeamSearch, log_softmax
from bionemo_serving.preprocessing.smiles import SmilesTokenizer
from support.paths import CHECKPOINTS

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
Substitution = tuple[int, str, str]
"""(0-based position, wild type, mutant)."""
TOLERANCE = 1e-4
"""The most a float the service answers may differ from transformers' on the same weights (other kernels, batching)."""


def mixed_sequences(model: str) -> list[str]:
    """Lengths from 1 to the model's limit, lower case and rare residues, all in one request."""
    limit = MODELS[model].max_length
    return ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "M", "mkTAyiakqr", "A" * limit, "XBUZOWC"]


def proteins(rng: np.random.Generator, lengths: list[int]) -> list[str]:
    """Random proteins of the 20 amino acids, one of each length."""
    return ["".join(rng.choice(list(AMINO_ACIDS), size=length)) for length in lengths]


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
        with torch.inference_mode():
            return self.model(**self._tokens(sequence)).last_hidden_state[0].numpy()

    def every_layer(self, sequence: str) -> np.ndarray:
        """[layers + 1, tokens, dim]: transformers' `output_hidden_states` of one unpadded sequence."""
        with torch.inference_mode():
            return torch.stack(self.model(**self._tokens(sequence), output_hidden_states=True).hidden_states)[:, 0].numpy()

    def _tokens(self, sequence: str) -> dict[str, torch.Tensor]:
        if self.architecture is Architecture.MBART:  # no transformers tokenizer exists for MegaMolBART
            ids = torch.from_numpy(SmilesTokenizer(max_tokens=10**6).encode(sequence))[None]
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if self.architecture is Architecture.T5_ENCODER:
            text = " ".join("X" if residue in "UZOB" else residue for residue in sequence.upper())
            return self.tokenizer(text, return_tensors="pt")
        return self.tokenizer(sequence.upper(), return_tensors="pt")

    def mean_embedding(self, sequence: str) -> np.ndarray:
        return self.hidden_states(sequence)[self.residues].mean(axis=0)

    @cached_property
    def masked_lm(self) -> EsmForMaskedLM:
        return EsmForMaskedLM.from_pretrained(self.folder).eval()

    def log_probs(self, sequence: str) -> np.ndarray:
        """[residues, 20]: log-softmax over the whole vocabulary of EsmForMaskedLM's logits at each residue, of the
        amino acids in AMINO_ACIDS order; `sequence` may hold `<mask>` (transformers' tokenizer reads it)."""
        tokens = self.tokenizer(sequence, return_tensors="pt")
        with torch.inference_mode():
            logits = self.masked_lm(**tokens).logits[0, 1:-1]
        columns = self.tokenizer.convert_tokens_to_ids(list(AMINO_ACIDS))
        return torch.log_softmax(logits, dim=-1)[:, columns].numpy()

    def masked_marginal(self, sequence: str, variant: list[Substitution]) -> float:
        """Meier et al. 2021: the variant's positions masked together in one pass."""
        masked = ["<mask>" if position in {p for p, _, _ in variant} else residue for position, residue in enumerate(sequence)]
        return self._marginal(self.log_probs("".join(masked)), variant)

    def wildtype_marginal(self, sequence: str, variant: list[Substitution]) -> float:
        return self._marginal(self.log_probs(sequence), variant)

    def pseudo_log_likelihood(self, sequence: str) -> float:
        """Each position masked in turn, one sequence per pass."""
        total = 0.0
        for position, residue in enumerate(sequence):
            masked = sequence[:position] + "<mask>" + sequence[position + 1 :]
            total += float(self.log_probs(masked)[position, AMINO_ACIDS.index(residue)])
        return total

    @staticmethod
    def _marginal(log_probs: np.ndarray, variant: list[Substitution]) -> float:
        return float(
            sum(log_probs[p, AMINO_ACIDS.index(mt)] - log_probs[p, AMINO_ACIDS.index(wt)] for p, wt, mt in variant)
        )

    @cached_property
    def eager(self) -> EsmModel:
        """The encoder with eager attention, the one that returns attention maps (contacts need them)."""
        return EsmModel.from_pretrained(self.folder, add_pooling_layer=False, attn_implementation="eager").eval()

    def contacts(self, sequence: str) -> np.ndarray:
        """[residues, residues]: transformers' `EsmModel.predict_contacts` of one unpadded sequence."""
        tokens = self.tokenizer(sequence.upper(), return_tensors="pt")
        with torch.inference_mode():
            return self.eager.predict_contacts(tokens["input_ids"], tokens["attention_mask"])[0].numpy()


def greedy_reference(reference: TransformersReference, hiddens: np.ndarray, mask: np.ndarray, steps: int) -> list[str]:
    """transformers' greedy token ids, written out as SMILES the way the service writes its own."""
    detokenizer = SmilesTokenizer(max_tokens=510)
    return [detokenizer.decode(np.asarray(ids)) for ids in reference.greedy(hiddens, mask, steps)]
