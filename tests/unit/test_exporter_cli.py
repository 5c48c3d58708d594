"""`python -m bionemo_serving.exporter`: what it refuses before exporting anything (an unreadable checkpoint, a GPU
target without CUDA, Navigator missing, an unpublished size) and the copy of a trained default. What it shows and
writes as it exports, and the Navigator path, is tests/e2e/test_exporter_cli_e2e.py's."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bionemo_serving import model_catalog
from bionemo_serving.exporter.__main__ import main
from bionemo_serving.exporter.architectures import copy_trained_default
from bionemo_serving.exporter.errors import OptimizerUnavailable
from bionemo_serving.exporter.pipeline import Optimizer, export_model
from bionemo_serving.model_catalog import MODELS, TrainedDefault
from support.checkpoints import TINY_ESM2, TinyModels


@pytest.fixture(scope="module")
def checkpoint(tiny_models: TinyModels) -> Path:
    return tiny_models.checkpoint("esm2nv")


def test_an_unreadable_checkpoint_exits_1_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "esm2nv", "--checkpoint", str(tmp_path / "nowhere"), "--repository", str(tmp_path)]) == 1
    output = capsys.readouterr()
    assert f"error: {tmp_path / 'nowhere' / 'config.json'}: missing" in output.err
    assert "load     esm2nv" in output.err and "failed after" in output.err
    assert "Traceback" not in output.err


def test_a_gpu_target_without_a_cuda_onnxruntime_is_refused_plainly(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = tmp_path / "repository"
    arguments = ["export", "esm2nv", "--checkpoint", str(checkpoint), "--repository", str(repository), "--target", "gpu"]
    assert main(arguments) == 1
    error = capsys.readouterr().err
    assert "error: --target gpu: this onnxruntime has no CUDAExecutionProvider" in error
    assert "--target cpu (every target's config is written either way)" in error
    assert "load " not in error and not repository.exists()  # refused before loading or writing anything


def test_navigator_missing_is_said_plainly_before_loading(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "model_navigator", None)  # what an environment without it looks like
    with pytest.raises(OptimizerUnavailable, match=r"needs Triton Model Navigator, which is not installed"):
        export_model(TINY_ESM2, checkpoint, tmp_path, optimizer=Optimizer.NAVIGATOR)
    assert list(tmp_path.iterdir()) == []


def test_a_size_the_model_was_not_published_at_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["defaults", "--models", "esm2nv", "esm1nv", "--size", "150M", "--checkpoints", str(tmp_path)]
    assert main([*arguments, "--repository", str(tmp_path / "repository")]) == 1
    assert capsys.readouterr().err == "error: --size 150M: no published size of esm1nv has that name\n"
    assert not list(tmp_path.iterdir())  # refused before any checkpoint was written
    assert MODELS["esm2nv"].at_size("650M").default_checkpoint_config["num_hidden_layers"] == 33
    with pytest.raises(KeyError, match="esm2nv has no published size '3B'; known: 8M, 150M, 650M"):
        MODELS["esm2nv"].at_size("3B")


def test_a_trained_default_is_copied_file_for_file_over_a_random_init_checkpoint(tmp_path: Path) -> None:
    """`exporter defaults` exports a catalogued trained default from the folder it is copied to, checkpoints/<model>:
    what the tests' transformers reference loads. A random-init checkpoint there before is replaced; a second copy
    changes nothing."""
    shipped = tmp_path / "weights" / "model"
    shipped.mkdir(parents=True)
    (shipped / "config.json").write_text('{"trained": true}')
    (shipped / "MODEL_CARD.md").write_text("card")
    target = tmp_path / "checkpoints" / "model"
    target.mkdir(parents=True)
    (target / "config.json").write_text('{"trained": false}')
    trained = TrainedDefault("weights/model", "trained here")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_catalog, "PROJECT_ROOT", tmp_path)
        assert copy_trained_default(trained, target)
        assert (target / "config.json").read_text() == '{"trained": true}' and (target / "MODEL_CARD.md").is_file()
        assert not copy_trained_default(trained, target)
    assert trained.weights == "trained here (weights/model/MODEL_CARD.md)"
    assert replace(MODELS["megamolbart"], trained_default=trained).default_weights == trained.weights
    assert MODELS["esm2nv"].at_size("150M").trained_default is None
