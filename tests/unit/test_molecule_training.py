"""bionemo_serving.training.megamolbart at a tiny shape on a few dozen MOSES train molecules: it learns, resumes exactly, exports a
folder the exporter loads, and reads no test split."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from rdkit import Chem
from support.checkpoints import TINY_SIZES
from transformers import MBartForConditionalGeneration

from benchmarks import radius_sweep
from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.model_catalog import MODELS, GraphRole
from bionemo_serving.preprocessing.smiles import SmilesTokenizer, tanimoto_similarity
from bionemo_serving.training import megamolbart, moses_data
from bionemo_serving.training.batch_stream import BatchStream
from bionemo_serving.training.denoising import IGNORED_LABEL, Noising, batch_seed, make_batch
from bionemo_serving.training.recipe import Recipe
from bionemo_serving.training.run_state import load_run

TOKENIZER = SmilesTokenizer(MODELS["megamolbart"].max_length)
STEPS = 20
TINY_RUN = [
    "--threads", "1", "--train-limit", "48", "--holdout", "8", "--batch-size", "8", "--learning-rate", "1e-2",
    "--warmup-steps", "2", "--log-every", "1", "--config", json.dumps(TINY_SIZES["megamolbart"]),
]  # fmt: skip
"""40 molecules to train on, 5 batches an epoch: a run crosses epoch boundaries, a resume starts mid-epoch."""


@pytest.fixture(scope="module")
def opened_splits() -> list[str]:
    """Every MOSES file the module's training runs asked for or decompressed."""
    return []


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, opened_splits: list[str]) -> Path:
    """One run of STEPS steps, evaluated and exported (into `export/`), with every MOSES file it opens recorded."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    with pytest.MonkeyPatch.context() as patch:
        split_file, gzip_open = moses_data.split_file, gzip.open

        def recorded_split_file(split: str) -> Path:
            opened_splits.append(split)
            return split_file(split)

        def recorded_gzip_open(path: Path, *arguments: object) -> object:
            opened_splits.append(Path(path).name)
            return gzip_open(path, *arguments)

        patch.setattr(moses_data, "split_file", recorded_split_file)
        patch.setattr(moses_data.gzip, "open", recorded_gzip_open)
        command = [
            "--run-dir",
            str(folder),
            "--steps",
            str(STEPS),
            *TINY_RUN,
            "--eval",
            "4",
            "--export",
            str(folder / "export"),
        ]
        assert megamolbart.main(command) == 0
    return folder


def test_loss_falls(uninterrupted: Path) -> None:
    losses = [point["loss"] for point in json.loads((uninterrupted / "training.json").read_text())["losses"]]
    assert len(losses) == STEPS
    assert np.mean(losses[-3:]) < 0.8 * np.mean(losses[:3])


def test_resumed_run_equals_uninterrupted(uninterrupted: Path, tmp_path: Path) -> None:
    assert megamolbart.main(["--run-dir", str(tmp_path), "--steps", "7", *TINY_RUN]) == 0
    with pytest.raises(SystemExit, match="--resume"):
        megamolbart.main(["--run-dir", str(tmp_path), "--steps", str(STEPS), "--threads", "1"])
    assert (
        megamolbart.main(
            ["--run-dir", str(tmp_path), "--resume", "--steps", str(STEPS), "--threads", "1", "--log-every", "1"]
        )
        == 0
    )
    whole, resumed = load_run(uninterrupted), load_run(tmp_path)
    assert resumed.progress == whole.progress
    assert whole.model.keys() == resumed.model.keys()
    for name, tensor in whole.model.items():
        assert torch.equal(tensor, resumed.model[name]), name
    for index, state in whole.optimizer["state"].items():
        assert all(torch.equal(value, resumed.optimizer["state"][index][key]) for key, value in state.items())
    record = json.loads((tmp_path / "training.json").read_text())
    assert [session["steps"] for session in record["sessions"]] == [[0, 7], [7, STEPS]]
    assert record["recipe"] == whole.record["recipe"]
    assert record["losses"] == [{**point, "wall_seconds": mine["wall_seconds"]}
                                for point, mine in zip(whole.record["losses"], record["losses"])]  # fmt: skip


def test_export_loads_in_transformers_and_the_exporter(uninterrupted: Path) -> None:
    folder = uninterrupted / "export"
    shipped = {"config.json", "generation_config.json", "model.safetensors", "megamolbart.vocab"}
    assert {path.name for path in folder.iterdir()} == shipped | {"training.json", "MODEL_CARD.md"}
    model = MBartForConditionalGeneration.from_pretrained(folder)
    latent_norm = model.get_encoder().layer_norm
    assert torch.equal(latent_norm.weight, torch.full_like(latent_norm.weight, Recipe().latent_scale))
    assert torch.equal(latent_norm.bias, torch.zeros_like(latent_norm.bias))
    trained = load_run(uninterrupted).model
    assert all(torch.equal(tensor, trained[name]) for name, tensor in model.state_dict().items() if name in trained)
    loaded = load_for_export(MODELS["megamolbart"], folder)
    assert {GraphRole.ENCODER, GraphRole.DECODER} <= set(loaded.graphs)
    card = (folder / "MODEL_CARD.md").read_text()
    assert "MOSES" in card and "MIT" in card and f"{STEPS} steps" in card
    record = json.loads((folder / "training.json").read_text())
    assert record["progress"]["steps"] == STEPS and record["evaluations"][0]["molecules"] == 4
    assert record["sessions"][0]["hardware"]["cpu"] and record["sessions"][0]["torch"] == torch.__version__


def test_training_reads_the_train_split_only(uninterrupted: Path, opened_splits: list[str]) -> None:
    assert opened_splits and set(opened_splits) == {"train", "train.csv.gz"}
    with pytest.raises(ValueError, match="held-out"):
        moses_data.held_out_molecules("train", TOKENIZER, 128)


def test_denoising_batch_is_megamolbart_s() -> None:
    smiles = moses_data.training_molecules(TOKENIZER, 128, holdout=1, limit=16).holdout_smiles * 8  # one molecule
    noising = Noising(mask_prob=0.0, span_lambda=3.0, randomize_prob=1.0, max_tokens=128)
    batch = make_batch(smiles, batch_seed(0, 0, 0), noising, TOKENIZER)
    assert (batch.decoder_ids[:, 0] == TOKENIZER.begin_id).all()
    target = [TOKENIZER.ids[token] for token in TOKENIZER.split(smiles[0])]
    assert batch.labels[0][batch.labels[0] != IGNORED_LABEL].tolist() == [*target, TOKENIZER.end_id]
    spellings = {TOKENIZER.decode(row[row != TOKENIZER.pad_id]) for row in batch.encoder_ids}
    assert len(spellings) > 1 and {Chem.CanonSmiles(spelling) for spelling in spellings} == {smiles[0]}
    masked = make_batch(smiles, batch_seed(0, 0, 0), Noising(0.5, 3.0, 0.0, 128), TOKENIZER)
    assert (masked.encoder_ids == TOKENIZER.ids["<MASK>"]).sum(axis=1).min() > 0
    assert np.array_equal(masked.labels, batch.labels)


def test_workers_make_the_same_batches() -> None:
    recipe = Recipe(batch_size=8, holdout=8, train_limit=48)
    data = moses_data.training_molecules(TOKENIZER, recipe.max_tokens, recipe.holdout, recipe.train_limit)
    streams = [BatchStream(data, recipe, TOKENIZER, 0, 3, workers) for workers in (0, 2)]
    try:
        for alone, made in zip(*([next(stream) for _ in range(4)] for stream in streams)):
            assert (alone.epoch, alone.position) == (made.epoch, made.position)
            assert np.array_equal(alone.batch.encoder_ids, made.batch.encoder_ids)
            assert np.array_equal(alone.batch.labels, made.batch.labels)
    finally:
        for stream in streams:
            stream.close()


def test_sampled_figures_count_as_the_benchmark_does() -> None:
    seeds = ["CCO", "c1ccccc1"]
    groups = [["CCO", "CCN", None], ["CCN"]]  # the seed back, a new one, an invalid one; the same new one again
    figures = radius_sweep.sampled_figures(seeds, groups)
    assert figures["valid"] == 0.75
    assert figures["different"] == 0.5
    assert figures["unique"] == pytest.approx(2 / 3)
    expected = (tanimoto_similarity("CCO", "CCN") + tanimoto_similarity("c1ccccc1", "CCN")) / 2
    assert figures["tanimoto_different"] == pytest.approx(expected)


def test_radius_sweep_measures_a_run_on_its_set_aside_molecules(uninterrupted: Path, tmp_path: Path) -> None:
    output = tmp_path / "sweep.json"
    command = [str(uninterrupted), "--json", str(output), "--reconstruct", "3", "--seeds", "2", "--samples", "2"]
    assert radius_sweep.main([*command, "--radii", "0", "1.5"]) == 0
    figures = json.loads(output.read_text())
    run = figures["runs"][uninterrupted.name]
    assert set(run["radii"]) == {"0.0", "1.5"}
    assert run["recipe"]["latent_scale"] == Recipe().latent_scale
    assert 0.0 <= run["reconstructed"] <= 1.0
    assert figures["command"].endswith("--radii 0 1.5")
    with pytest.raises(SystemExit, match="set aside"):
        radius_sweep.main([str(uninterrupted), "--json", str(output), "--reconstruct", "8", "--seeds", "1"])
