"""Every checkpoint kind a user brings, exported by the exporter and served by the real stack with parity.

One repository holds esm1nv from a bare HuggingFace `EsmModel` folder,
prott5nv from a `T5EncoderModel` folder with its tokenizer.json, esm2nv from a
BioNeMo ESM-2nv `.nemo` with its masked-LM head and megamolbart from a BioNeMo
MegaMolBART `.nemo` (BioNeMo's flat config: fused tanh GELU, an untied token
head, its vocabulary packed). The service's answers are compared with the
original torch models the checkpoints were written from.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import torch
from transformers import EsmForMaskedLM, EsmModel, EsmTokenizer, MBartForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from bionemo_serving.exporter import export_model
from bionemo_serving.model_catalog import MODELS
from bionemo_serving.preprocessing.smiles import MEGAMOLBART_TOKENS, VOCABULARY_FILE, SmilesTokenizer
from bionemo_serving.preprocessing.vocabularies import ESM_ALPHABET
from support.huggingface_checkpoints import esm_checkpoint, t5_checkpoint
from support.nemo_checkpoints import hf_model as esm_nemo_source
from support.nemo_checkpoints import megatron_config as esm_megatron_config
from support.nemo_checkpoints import megatron_state_dict as esm_megatron_state_dict
from support.nemo_checkpoints import write_nemo
from support.nemo_encoder_decoder import MEGAMOLBART_VOCABULARY, regex_tokenizer
from support.nemo_encoder_decoder import hf_model as mbart_nemo_source
from support.nemo_encoder_decoder import megatron_config as mbart_megatron_config
from support.nemo_encoder_decoder import megatron_state_dict as mbart_megatron_state_dict
from support.reference import TransformersReference
from support.service import RunningService, start_launcher, stop_service

pytestmark = pytest.mark.e2e

PROTEIN = "MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQVIVQDIAYLRSLGYNIVATPRGYVLAGG"
MOLECULES = ["CC(=O)Nc1ccc(O)cc1", "c1ccccc1O"]


def save_as_huggingface_folder(model: EsmForMaskedLM, folder: Path) -> Path:
    """The torch model a .nemo was written from, as a folder the transformers reference reads."""
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(ESM_ALPHABET) + "\n")
    EsmTokenizer(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Write one checkpoint of each kind, export all four into one repository; return what they were made from."""
    root = tmp_path_factory.mktemp("kinds")
    esm_checkpoint(root / "esm1-folder", "esm1nv", EsmModel)
    t5_checkpoint(root / "t5-folder", whole_seq2seq=False)
    esm2 = esm_nemo_source("esm2nv", seed=11)  # an EsmForMaskedLM: the .nemo carries its masked-LM head
    esm2_nemo = write_nemo(
        root / "esm2nv.nemo", esm_megatron_config("esm2nv", bias_gelu_fusion=False), esm_megatron_state_dict(esm2)
    )
    flags = {"tanh_gelu": True, "shared_tokens": True, "shared_head": False, "head_bias": False}
    molbart = mbart_nemo_source(len(MEGAMOLBART_TOKENS), 12, **flags)
    config = mbart_megatron_config(False, share_decoder_tokens_head_embeddings=False, tokenizer=regex_tokenizer())
    artifacts = {MEGAMOLBART_VOCABULARY: VOCABULARY_FILE.read_bytes()}
    state = mbart_megatron_state_dict(molbart, 640, ("weight",))
    molbart_nemo = write_nemo(root / "megamolbart.nemo", config, state, "gz", artifacts)
    checkpoints = {
        "esm1nv": root / "esm1-folder",
        "prott5nv": root / "t5-folder",
        "esm2nv": esm2_nemo,
        "megamolbart": molbart_nemo,
    }
    for name, checkpoint in checkpoints.items():  # the ONNX file alone: every runtime's parity is test_runtimes_e2e's
        export_model(MODELS[name], checkpoint, root / "repository", runtimes=())
    return {
        "repository": root / "repository",
        "esm1nv": TransformersReference("esm1nv", root / "esm1-folder"),
        "prott5nv": TransformersReference("prott5nv", root / "t5-folder"),
        "esm2nv": TransformersReference("esm2nv", save_as_huggingface_folder(esm2, root / "esm2-reference")),
        "megamolbart": molbart,
    }


@pytest.fixture(scope="module")
def service(sources: dict[str, object]) -> Iterator[RunningService]:
    running = start_launcher({"BIONEMO_MODEL_REPOSITORY": str(sources["repository"])})
    yield running
    stop_service(running)


@pytest.mark.parametrize("name", ["esm1nv", "prott5nv", "esm2nv"])
def test_protein_checkpoints_serve_the_embeddings_of_their_weights(
    service: RunningService, sources: dict[str, object], name: str
) -> None:
    answer = service.answer("/embed", {"model": name, "sequences": [PROTEIN, PROTEIN[:9]]})
    reference: TransformersReference = sources[name]
    for sequence, embedding in zip([PROTEIN, PROTEIN[:9]], answer["embeddings"]):
        np.testing.assert_allclose(embedding, reference.mean_embedding(sequence), rtol=0, atol=1e-4)


def test_megamolbart_nemo_serves_its_embeddings_and_greedy_decoding(
    service: RunningService, sources: dict[str, object]
) -> None:
    original: MBartForConditionalGeneration = sources["megamolbart"]
    tokenizer = SmilesTokenizer(max_tokens=MODELS["megamolbart"].max_length)
    answer = service.answer("/embed", {"model": "megamolbart", "sequences": MOLECULES})
    for smiles, embedding in zip(MOLECULES, answer["embeddings"]):
        ids = torch.from_numpy(tokenizer.encode(smiles))[None]
        with torch.inference_mode():
            states = original.get_encoder()(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        np.testing.assert_allclose(embedding, states[0].mean(0).numpy(), rtol=0, atol=1e-4)

    latent = service.answer("/hidden", {"model": "megamolbart", "sequences": MOLECULES})
    decoded = service.answer("/decode", {"hiddens": latent["hiddens"], "mask": latent["mask"], "max_length": 20})
    with torch.inference_mode():  # transformers' own greedy generate on the original weights
        ids = original.generate(
            encoder_outputs=BaseModelOutput(last_hidden_state=torch.tensor(latent["hiddens"])),
            attention_mask=torch.tensor(latent["mask"]),
            decoder_start_token_id=tokenizer.begin_id,
            eos_token_id=MEGAMOLBART_TOKENS.index("&"),
            pad_token_id=tokenizer.pad_id,
            forced_bos_token_id=None,
            forced_eos_token_id=None,
            max_new_tokens=20,
            do_sample=False,
            num_beams=1,
        )
    assert decoded["smiles"] == [tokenizer.decode(np.asarray(row)) for row in ids.tolist()]


def test_esm2nv_nemo_serves_the_log_probs_of_its_masked_lm_head(
    service: RunningService, sources: dict[str, object]
) -> None:
    sequences = [PROTEIN, PROTEIN[:5] + "<mask>" + PROTEIN[6:20]]
    answer = service.answer("/logits", {"model": "esm2nv", "sequences": sequences})
    reference: TransformersReference = sources["esm2nv"]
    for sequence, log_probs in zip(sequences, answer["log_probs"]):
        np.testing.assert_allclose(log_probs, reference.log_probs(sequence), rtol=0, atol=1e-4)


def test_a_checkpoint_without_the_head_serves_no_logits_and_says_why(service: RunningService) -> None:
    """esm1nv here is a bare EsmModel folder: no language-model graph was exported for it."""
    listed = {m["name"]: m["capabilities"] for m in requests.get(f"{service.url}/models", timeout=30).json()["models"]}
    assert {"logits", "score"} <= set(listed["esm2nv"]) and not {"logits", "score"} & set(listed["esm1nv"])
    response = requests.post(f"{service.url}/logits", json={"model": "esm1nv", "sequences": [PROTEIN]}, timeout=60)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["message"] == (
        "esm1nv cannot logits: its checkpoint has no head for it (the model repository has no esm1nv_language_model); "
        "models that can: esm2nv"
    )
