"""The recipe of a MegaMolBART training run: every choice that changes the trained weights, and the model it builds.

A run's recipe is fixed when it starts and saved with its checkpoint: `--resume` continues the same recipe, and
training.json records it whole, so a shipped default says exactly how it was made.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import MBartConfig, MBartForConditionalGeneration

from bionemo_serving.exporter.exportable import MEGAMOLBART_COMMON
from bionemo_serving.model_catalog import MODELS

MODEL = MODELS["megamolbart"]
SCHEDULES = ("inverse-sqrt", "cosine")
TOKENIZER_BOUND = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
"""Config keys the served tokenizer fixes: a shape may change anything else of the exporter's MBart config."""


@dataclass(frozen=True)
class Recipe:
    """Defaults: BioNeMo MegaMolBART's denoising and optimiser where they carry over; see each field for why."""

    shape: dict[str, Any] = field(default_factory=lambda: dict(MODEL.default_checkpoint_config))
    """The catalog's default checkpoint shape (what `exporter defaults` builds at random), or a `--config` override."""
    seed: int = 0
    """Initial weights, data order, masks, random SMILES and latent noise all derive from it."""
    batch_size: int = 512
    """Molecules per step: 512 keeps a GPU busy with this small model (9,600 molecules/s on an H200 beside a second
    run); BioNeMo trains MegaMolBART with micro-batches of 128 on each of many GPUs."""
    max_tokens: int = 128
    """Longest SMILES trained on: MOSES train's longest has 54 tokens, so this filters nothing today."""
    holdout: int = 1000
    """Train molecules set aside for `--eval` (moses_data.HOLDOUT_SEED picks them): progress without any test split."""
    train_limit: int | None = None
    """Only the first N molecules of MOSES train (tests and smoke runs); None: all 1.58 M."""
    pool_batches: int = 50
    """Length bucketing: batches are sorted by length within pools of this many (little padding, still shuffled)."""
    mask_prob: float = 0.1
    span_lambda: float = 3.0
    """BioNeMo MegaMolBART's span masking: a span starts with mask_prob, Poisson(span_lambda) tokens long."""
    randomize_prob: float = 0.0
    """Share of encoder inputs spelled as a random SMILES (Chemformer's augmentation, there 0.5). 0: a first run
    (1,148 steps) with 0.5 and noise up to 1.0 learned about three times slower per molecule and reconstructed 3 of
    100 molecules at step 763; the shipped default is canonical in, canonical out, as the service's clients send."""
    latent_noise: float = 1.25
    """sigma_max: each molecule's encoder output gets Gaussian noise of a std drawn from U(0, sigma_max), so latents
    near a molecule decode to valid molecules (MolMIM's idea). It covers /generate's default scaled_radius, 1.0, so
    the decoder has learned what lies there."""
    clean_share: float = 0.2
    """Share of molecules trained with no latent noise at all, for exact reconstruction from a clean latent (not
    measured alone: runs with it reconstructed 0.87 at gain 0.17, runs without it 0.79 at gain 0.15)."""
    latent_scale: float = 0.2
    """The gain the encoder's final LayerNorm is frozen at: each latent value's scale, against which noise is
    measured. Noise of std sigma leaves a signal-to-noise ratio of (latent_scale / sigma)^2 in every value. At gain 1
    the latent holds so much that noise of 1.0 gave the seed back 79 % of the time, or an invalid molecule; at 0.2,
    noise of 1.0 leaves too little to single out the seed, and the decoder writes a valid neighbour of it. Lower
    gains sample more diversely and reconstruct less: benchmarks/results/megamolbart-recipe-search.json."""
    learning_rate: float = 1e-3
    """Peak: what Noam's schedule (BioNeMo MegaMolBART's) reaches at this width, d_model 256, with 4,000 warmup steps
    (BioNeMo's d_model 512 and 8,000 steps peak at 5e-4)."""
    warmup_steps: int = 500
    """Shorter than Noam's 4,000: the shipped run is 3,165 steps (one epoch at batch 512)."""
    schedule: str = "inverse-sqrt"
    """After warmup: inverse-sqrt (Noam's shape) needs no planned length, for runs bounded by minutes; cosine decays
    to min_learning_rate at decay_steps and stays there."""
    decay_steps: int | None = None
    min_learning_rate: float = 1e-5
    weight_decay: float = 0.01
    """AdamW's, on weight matrices and embeddings only (not on biases and LayerNorms)."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    """Global gradient norm, as BioNeMo's gradient_clip_val."""

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r}: known {', '.join(SCHEDULES)}")
        if self.schedule == "cosine" and (self.decay_steps is None or self.decay_steps <= self.warmup_steps):
            raise ValueError("the cosine schedule needs decay_steps beyond warmup_steps")
        bound = sorted(set(self.shape) & set(TOKENIZER_BOUND))
        if bound:
            raise ValueError(f"the shape may not set {', '.join(bound)}: the served tokenizer fixes them")

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, recorded: dict[str, Any]) -> Recipe:
        return cls(**{**recorded, "adam_betas": tuple(recorded["adam_betas"])})

    def learning_rate_at(self, step: int) -> float:
        """The learning rate of optimiser step `step` (0-based): linear warmup, then the schedule."""
        if step < self.warmup_steps:
            return self.learning_rate * (step + 1) / self.warmup_steps
        if self.schedule == "inverse-sqrt":
            return self.learning_rate * math.sqrt(self.warmup_steps / (step + 1))
        assert self.decay_steps is not None
        progress = min(1.0, (step - self.warmup_steps) / (self.decay_steps - self.warmup_steps))
        return self.min_learning_rate + (self.learning_rate - self.min_learning_rate) * 0.5 * (
            1 + math.cos(math.pi * progress)
        )


def model_config(recipe: Recipe) -> MBartConfig:
    """The exporter's MBart config for the recipe's shape (`exporter.architectures._create_mbart` builds the same)."""
    return MBartConfig(**{**MEGAMOLBART_COMMON, **recipe.shape})


def new_model(recipe: Recipe) -> MBartForConditionalGeneration:
    """The recipe's model at its initial weights (seeded), with the latent's LayerNorm frozen at `latent_scale`.

    The encoder's final LayerNorm makes each latent vector zero-mean and unit-variance; with its affine parameters
    held at weight `latent_scale` and bias 0, the latent keeps that scale, so noise of a given std means the same all
    through training. Left free, the encoder would learn to grow its output past the noise, and /generate's
    scaled_radius would perturb nothing.
    """
    torch.manual_seed(recipe.seed)
    model = MBartForConditionalGeneration(model_config(recipe))
    freeze_latent_norm(model, recipe.latent_scale)
    return model


def freeze_latent_norm(model: MBartForConditionalGeneration, scale: float) -> None:
    norm = model.get_encoder().layer_norm
    with torch.no_grad():
        norm.weight.fill_(scale)
        norm.bias.zero_()
    norm.weight.requires_grad_(False)
    norm.bias.requires_grad_(False)


def optimizer_for(model: torch.nn.Module, recipe: Recipe) -> torch.optim.AdamW:
    """AdamW over the trainable parameters, weight decay on matrices only; the schedule sets each step's rate."""
    trainable = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    groups = [
        {
            "params": [parameter for _, parameter in trainable if parameter.ndim >= 2],
            "weight_decay": recipe.weight_decay,
        },
        {"params": [parameter for _, parameter in trainable if parameter.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=recipe.learning_rate_at(0), betas=recipe.adam_betas, eps=recipe.adam_eps)
