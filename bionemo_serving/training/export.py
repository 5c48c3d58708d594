"""A trained run as the checkpoint folder the exporter takes, with its record and a model card made from it.

The folder is what `bionemo_serving.exporter.architectures._create_mbart` writes for the random default (config.json,
generation_config.json, model.safetensors, megamolbart.vocab), so `python -m bionemo_serving.exporter` and `make models` take a
trained default exactly as they take a random one; training.json and MODEL_CARD.md say where its weights came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import MBartForConditionalGeneration

from bionemo_serving.preprocessing.smiles import VOCABULARY_FILE
from bionemo_serving.training.record import RECORD_FILE

MODEL_CARD_FILE = "MODEL_CARD.md"
SIZE_LIMIT_BYTES = 50_000_000
"""A default that ships with the product weighs at most 50 MB."""


class ExportTooLarge(RuntimeError):
    pass


def export_checkpoint(model: MBartForConditionalGeneration, record: dict[str, Any], folder: Path) -> int:
    """Write the folder; its size in bytes. Raises ExportTooLarge (after writing) past SIZE_LIMIT_BYTES."""
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder)  # safetensors: no pickle in a shipped checkpoint
    (folder / VOCABULARY_FILE.name).write_text(VOCABULARY_FILE.read_text())
    (folder / RECORD_FILE).write_text(json.dumps(record, indent=1) + "\n")
    (folder / MODEL_CARD_FILE).write_text(model_card(record))
    size = sum(path.stat().st_size for path in folder.iterdir() if path.is_file())
    if size > SIZE_LIMIT_BYTES:
        raise ExportTooLarge(
            f"{folder}: {size / 1e6:.1f} MB, over the {SIZE_LIMIT_BYTES / 1e6:.0f} MB a shipped default may weigh"
        )
    return size


def model_card(record: dict[str, Any]) -> str:
    """MODEL_CARD.md, every figure from training.json."""
    recipe, data, progress, config = record["recipe"], record["data"], record["progress"], record["model_config"]
    hardware = "; ".join(sorted({_hardware(session) for session in record["sessions"]}))
    lines = [
        "# MegaMolBART default checkpoint (trained on MOSES train)",
        "",
        "A small MegaMolBART trained by this project's `python -m bionemo_serving.training.megamolbart` so that the served default",
        "returns molecules rather than noise. It is **not** NVIDIA BioNeMo's MegaMolBART weights, and was not trained",
        "on their data (ZINC-15).",
        "",
        "## Data",
        "",
        f"- MOSES (molecularsets/moses, MIT licence), the **train split only**: {data['read']:,} SMILES read,",
        (
            f"  {data['unknown_tokens']} left out for tokens outside MegaMolBART's vocabulary, {data['too_long']} for"
            f" over {recipe['max_tokens']} tokens;"
        ),
        f"  {data['holdout']:,} set aside (never trained on) to watch reconstruction; {data['training']:,} trained on.",
        "- No test or test_scaffolds molecule was read.",
        "",
        "## Objective",
        "",
        (
            f"- BioNeMo MegaMolBART's denoising: spans of the encoder's SMILES replaced by `<MASK>` (a span starts with"
            f" probability {recipe['mask_prob']},"
        ),
        (
            f"  Poisson({recipe['span_lambda']}) tokens long); the decoder, teacher-forced from `^`, writes the whole"
            " canonical SMILES and `&`."
        ),
        (
            f"- {recipe['randomize_prob']:.0%} of encoder inputs are random SMILES of the molecule (RDKit doRandom);"
            " the target stays canonical."
            if recipe["randomize_prob"]
            else "- The encoder reads the canonical SMILES, as the decoder writes it."
        ),
        (
            f"- The encoder's final LayerNorm is frozen at gain {recipe.get('latent_scale', 1.0)} and bias 0: each"
            " latent value has that scale, whatever training does."
        ),
        (
            f"- Gaussian noise on the encoder's output, its std drawn per molecule from U(0, {recipe['latent_noise']})"
            + (f", none for {recipe['clean_share']:.0%} of molecules" if recipe.get("clean_share") else "")
            + ": latents near"
        ),
        "  a molecule decode to valid molecules, nearby but different ones at /generate's default scaled_radius.",
        "",
        "## Shape and training",
        "",
        (
            f"- MBart (the exporter's MegaMolBART config): d_model {config['d_model']},"
            f" {config['encoder_layers']} encoder and {config['decoder_layers']} decoder layers,"
        ),
        (
            f"  {config['encoder_attention_heads']} heads, feed-forward {config['encoder_ffn_dim']};"
            f" {record['parameters']:,} parameters."
        ),
        (
            f"- AdamW: learning rate {recipe['learning_rate']}, {recipe['schedule']} after"
            f" {recipe['warmup_steps']} warmup steps, weight decay {recipe['weight_decay']},"
        ),
        f"  gradient clip {recipe['grad_clip']}; batches of {recipe['batch_size']} molecules.",
        (
            f"- {progress['steps']:,} steps, {progress['molecules_seen']:,} molecules ({progress['epochs']:.2f} epochs)"
            f" in {_duration(progress['wall_seconds'])}, {len(record['sessions'])} session(s),"
        ),
        f"  on {hardware}.",
    ]
    if record["losses"]:
        first, last = record["losses"][0], record["losses"][-1]
        lines.append(
            f"- Training loss (token cross entropy): {first['loss']:.3f} at step {first['step']},"
            f" {last['loss']:.3f} at step {last['step']}."
        )
    if record["evaluations"]:
        evaluation = record["evaluations"][-1]
        noised = evaluation["noised"]
        lines += [
            (
                f"- At step {evaluation['step']}, {evaluation['reconstructed']} of {evaluation['molecules']} train"
                " molecules set aside came back exactly from their latent (greedy);"
            ),
            (
                f"  with noise of {noised['scaled_radius']}, {noised['valid']} decoded to valid molecules,"
                f" {noised['new']} of them new."
            ),
        ]
    lines += [
        "- Everything else: `training.json` beside this card (the whole recipe, every session, the loss curve).",
        "",
        "## Intended use",
        "",
        "A demonstration default: it shows the service's embeddings, decoding and /generate working end to end on",
        "drug-like molecules without downloading BioNeMo's weights. Serve BioNeMo's MegaMolBART `.nemo` for real work.",
        "",
        "## Limitations",
        "",
        "- Small and briefly trained: reconstruction and sampling are far from BioNeMo's MegaMolBART.",
        "- MOSES covers drug-like molecules of 250 to 350 Da built from C, N, S, O, F, Cl, Br and H, with no charges;",
        "  molecules outside that space (larger, charged, metals, long SMILES) are out of distribution.",
        "- Its embeddings are not validated for any property prediction.",
        "",
        "Held-out figures (MOSES test) are in the project's docs, written by the benchmark; this card quotes only the",
        "train molecules set aside above.",
        "",
    ]
    return "\n".join(lines)


def _hardware(session: dict[str, Any]) -> str:
    hardware = session["hardware"]
    if "gpu" in hardware:
        return f"{hardware['gpu']} ({'bf16' if session['bf16'] else 'fp32'})"
    return f"{hardware['cpu']} ({session['threads']} CPU threads)"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"
