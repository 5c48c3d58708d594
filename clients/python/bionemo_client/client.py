"""The Python API: one method per command, files in and files out, the same code the CLI runs (cli.py).

    from bionemo_client import Client

    client = Client("http://127.0.0.1:3000")
    summary = client.embed_file("proteins.fasta", "embeddings.parquet", layers=[-1, 0])
    print(summary.line())
    vectors = client.embed(["MKTAYIAKQR", "MSLK"])  # in memory: [2, dim] float32
"""

from __future__ import annotations

import dataclasses
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from bionemo_client import jobs, outputs
from bionemo_client.records import InputError, Record, count, file_format, read, read_latents
from bionemo_client.service import Service
from bionemo_client.tasks import Contacts, Decode, Embed, Generate, Hidden, Logits, Scan, Task, Variants

TaskT = TypeVar("TaskT", bound=Task)

PROTEIN_MODEL = "esm2nv"
MOLECULE_MODEL = "megamolbart"


class Client:
    """The service at `url`. `concurrency`: requests in flight at once; `retries`: resends of one request after a
    429, 503, 504 or a dropped connection (each after the `Retry-After` the service gives); `client_id`: who the
    service serves fairly against other clients (default: this user at this host)."""

    def __init__(self, url: str = "http://127.0.0.1:3000", *, concurrency: int = 4, retries: int = 8,
                 timeout: float = 600.0, client_id: str | None = None) -> None:  # fmt: skip
        self.service = Service(url, retries=retries, timeout=timeout, connections=2 * concurrency, client_id=client_id)
        self.concurrency = concurrency
        self._listing: dict[str, Any] | None = None

    def close(self) -> None:
        self.service.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def models(self) -> dict[str, dict[str, Any]]:
        """GET /models' served models, by name."""
        return {model["name"]: model for model in self._models_listing()["models"]}

    def limits(self) -> dict[str, Any]:
        """GET /models' request limits: what one request may carry here (a service older than them publishes none)."""
        return self._models_listing().get("limits", {})

    def _models_listing(self) -> dict[str, Any]:
        if self._listing is None:
            self._listing = self.service.get("/models")
        return self._listing

    def within_limits(self, task: TaskT) -> TaskT:
        """`task` with its chunks no larger than the service takes in one request."""
        max_sequences = self.limits().get("max_sequences")
        if max_sequences is None or max_sequences >= task.max_items:
            return task
        return dataclasses.replace(task, max_items=max_sequences)

    def reads_smiles(self, model: str) -> bool:
        """Whether `model` reads SMILES (sent as written) rather than proteins (sent in upper case)."""
        served = self.models()
        if model not in served:
            raise InputError(f"model {model!r} is not served here; served: {', '.join(sorted(served))}")
        return served[model].get("tokenizer") == "smiles"

    # in memory

    def embed(self, sequences: list[str], *, model: str = PROTEIN_MODEL, layers: list[int] | None = None,
              pooling: str = "mean", normalize: bool = False) -> np.ndarray:  # fmt: skip
        """[n, dim] float32 ([n, layers, dim] with `layers`), in chunks within the service's limits; a refused
        sequence raises `JobFailed` naming it."""
        task = self.within_limits(Embed(model, layers=tuple(layers) if layers else None, pooling=pooling, normalize=normalize))
        normalize_text = str if self.reads_smiles(model) else str.upper
        records = (Record(i, str(i), normalize_text(text), i + 1) for i, text in enumerate(sequences))
        rows = []
        with ThreadPoolExecutor(self.concurrency) as requests:
            for chunk in jobs.chunks(records, task):
                table, failures = jobs.answer_chunk(task, self.service, requests, chunk)
                if failures:
                    raise jobs.JobFailed("; ".join(f"sequences[{name}]: {reason}" for name, _, reason in failures))
                rows.append(table)
        return outputs.stacked(pa.concat_tables(rows).column("embedding")) if rows else np.zeros((0, 0), np.float32)

    # files in, files out

    def embed_file(self, input: str | Path, output: str | Path, *, model: str = PROTEIN_MODEL,
                   layers: list[int] | None = None, pooling: str = "mean", normalize: bool = False,
                   per_token: bool = False, **job: Any) -> jobs.Summary:  # fmt: skip
        """An embedding per record (Parquet: `id`, `embedding`; `.npz`: `ids`, `embeddings`); `per_token`: every
        token's hidden state instead (Parquet `hiddens`), which `decode_file` reads back for a molecule model."""
        task: Task = Hidden(model) if per_token else Embed(model, layers=tuple(layers) if layers else None, pooling=pooling, normalize=normalize)
        return self._run(task, input, output, **job)

    def logits_file(self, input: str | Path, output: str | Path, *, model: str = PROTEIN_MODEL, **job: Any) -> jobs.Summary:
        return self._run(Logits(model), input, output, **job)

    def contacts_file(self, input: str | Path, output: str | Path, *, model: str = PROTEIN_MODEL,
                      plot: str | Path | None = None, **job: Any) -> jobs.Summary:  # fmt: skip
        summary = self._run(Contacts(model), input, output, **job)
        if plot:
            from bionemo_client import plots  # matplotlib, only when asked for a picture

            plots.contact_maps(Path(output), Path(plot))
        return summary

    def scan_file(self, input: str | Path, output: str | Path, *, model: str = PROTEIN_MODEL,
                  method: str = "masked-marginal", window: int = 32, heatmap: str | Path | None = None,
                  **job: Any) -> jobs.Summary:  # fmt: skip
        """Every single substitution of each protein, long form (id, position, wild_type, mutant, score)."""
        summary = self._run(Scan(model, window=window, method=method), input, output, **job)
        if heatmap:
            from bionemo_client import plots

            plots.scan_heatmaps(Path(output), Path(heatmap))
        return summary

    def score_file(self, mutations: str | Path, output: str | Path, *, wild_type: str,
                   model: str = PROTEIN_MODEL, method: str = "masked-marginal", **job: Any) -> jobs.Summary:  # fmt: skip
        """Variants of `wild_type` (a sequence, or a FASTA file whose first record is it), one per record of
        `mutations` (text, one per line; or a table's `mutant` column)."""
        return self._run(Variants(model, wild_type=self._wild_type(wild_type), method=method), mutations, output,
                         columns=("mutant", "mutation", "variant", "mutations"), **job)  # fmt: skip

    def decode_file(self, latents: str | Path, output: str | Path, *, model: str = MOLECULE_MODEL,
                    max_length: int = 128, **job: Any) -> jobs.Summary:  # fmt: skip
        return self._run(Decode(model, max_length=max_length), latents, output, latents=True, **job)

    def generate_file(self, input: str | Path, output: str | Path, *, model: str = MOLECULE_MODEL,
                      num_samples: int = 10, method: str = "greedy", scaled_radius: float = 1.0,
                      seed: int | None = None, **options: Any) -> jobs.Summary:  # fmt: skip
        job = {key: options.pop(key) for key in ("format", "restart", "progress") if key in options}
        task = Generate(model, num_samples=num_samples, method=method, scaled_radius=scaled_radius, seed=seed,
                        extra=options)  # fmt: skip
        return self._run(task, input, output, **job)

    def _run(self, task: Task, input: str | Path, output: str | Path, *, format: str | None = None,
             restart: bool = False, progress: bool | None = None, latents: bool = False,
             columns: tuple[str, ...] | None = None) -> jobs.Summary:  # fmt: skip
        source, output, task = Path(input), Path(output), self.within_limits(task)
        if latents:
            items, total = read_latents(source), None
        else:
            fmt = file_format(source, format)
            normalize = str if isinstance(task, Variants) or self.reads_smiles(task.model) else str.upper
            items = read(source, fmt, normalize, columns)
            total = count(source, fmt, columns) if (progress or (progress is None and sys.stderr.isatty())) else None
        stat = source.stat()
        described = {"path": str(source.resolve()), "bytes": stat.st_size, "modified_ns": stat.st_mtime_ns}
        return jobs.run(task, self.service, items, output, source=described, total=total,
                        concurrency=self.concurrency, restart=restart, progress=progress)  # fmt: skip

    def _wild_type(self, given: str) -> str:
        path = Path(given)
        if path.is_file():
            first = next((item for item in read(path, None, str.upper) if isinstance(item, Record)), None)
            if first is None:
                raise InputError(f"{path}: holds no wild-type sequence")
            return first.text
        return given.upper()
