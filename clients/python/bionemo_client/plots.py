"""Pictures of finished outputs, read back one protein at a time: a scan's heatmap, a contact map.

Several proteins in one output make one picture each, `scan.png` becoming `scan-<id>.png`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bionemo_client.tasks import AMINO_ACIDS  # noqa: E402


def picture_paths(path: Path, ids: list[str]) -> dict[str, Path]:
    """`path` for a single protein; else one path per protein, its id (made safe for a file name) after the stem."""
    if len(ids) == 1:
        return {ids[0]: path}
    return {identifier: path.with_name(f"{path.stem}-{re.sub(r'[^A-Za-z0-9_.-]', '_', identifier)}{path.suffix}")
            for identifier in ids}  # fmt: skip


def _tables(path: Path) -> Iterator[pa.RecordBatch]:
    if path.suffix.lower() in (".parquet", ".pq"):
        yield from pq.ParquetFile(path).iter_batches(batch_size=8192)
    else:
        parse = pacsv.ParseOptions(delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
        yield from pacsv.open_csv(path, parse_options=parse)


def _by_protein(path: Path) -> Iterator[tuple[str, pa.Table]]:
    """The output's rows grouped by consecutive `id`, one protein's rows at a time."""
    current, held = None, []
    for batch in _tables(path):
        ids = batch.column("id").to_pylist()
        start = 0
        for end in range(1, len(ids) + 1):
            if end == len(ids) or ids[end] != ids[start]:
                if ids[start] != current and held:
                    yield current, pa.Table.from_batches(held)
                    held = []
                current = ids[start]
                held.append(batch.slice(start, end - start))
                start = end
    if held:
        yield current, pa.Table.from_batches(held)


def scan_heatmaps(scores: Path, picture: Path) -> list[Path]:
    """Positions x the 20 amino acids of each scanned protein in `scores` (the long form `score --scan` writes),
    each wild type marked with a dot."""
    ids = [identifier for identifier, _ in _by_protein(scores)]
    paths = picture_paths(picture, ids)
    for identifier, rows in _by_protein(scores):
        positions = np.asarray(rows.column("position").to_pylist())
        first, last = int(positions.min()), int(positions.max())
        matrix = np.full((last - first + 1, len(AMINO_ACIDS)), np.nan)
        wild_types: dict[int, str] = {}
        for position, wild_type, mutant, score in zip(positions, *(rows.column(n).to_pylist() for n in ("wild_type", "mutant", "score"))):
            matrix[position - first, AMINO_ACIDS.index(mutant)] = score
            wild_types[int(position)] = wild_type
        for position, wild_type in wild_types.items():
            if wild_type in AMINO_ACIDS:
                matrix[position - first, AMINO_ACIDS.index(wild_type)] = 0.0
        width = min(60.0, max(6.0, 0.12 * len(matrix)))
        figure, axes = plt.subplots(figsize=(width, 4.0))
        reach = float(np.nanmax(np.abs(matrix))) or 1.0  # 0, the wild type's score, in the middle of the colours
        image = axes.imshow(matrix.T, aspect="auto", cmap="RdBu", interpolation="nearest", vmin=-reach, vmax=reach,
                            extent=(first - 0.5, last + 0.5, len(AMINO_ACIDS) - 0.5, -0.5))  # fmt: skip
        marked = [(position, AMINO_ACIDS.index(aa)) for position, aa in wild_types.items() if aa in AMINO_ACIDS]
        if marked:
            axes.scatter(*zip(*marked), s=6, c="black", marker="o", label="wild type")
            axes.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize="small", frameon=False)
        axes.set_yticks(range(len(AMINO_ACIDS)), list(AMINO_ACIDS))
        axes.set_xlabel("position")
        axes.set_ylabel("mutant")
        axes.set_title(f"{identifier}: substitution scores", loc="right")
        figure.colorbar(image, ax=axes, label="score")
        figure.tight_layout()
        figure.savefig(paths[identifier], dpi=100)
        plt.close(figure)
    return list(paths.values())


def contact_maps(contacts: Path, picture: Path) -> list[Path]:
    """Each protein's contact probabilities in `contacts` (the Parquet file `contacts` writes)."""
    ids = pq.read_table(contacts, columns=["id"]).column("id").to_pylist()
    paths = picture_paths(picture, ids)
    for batch in pq.ParquetFile(contacts).iter_batches(batch_size=16):
        for identifier, matrix in zip(batch.column("id").to_pylist(), batch.column("contacts").to_pylist()):
            figure, axes = plt.subplots(figsize=(5.5, 5.0))
            image = axes.imshow(np.asarray(matrix, np.float32), cmap="Blues", vmin=0.0, vmax=1.0, origin="upper")
            axes.set_xlabel("residue")
            axes.set_ylabel("residue")
            axes.set_title(f"{identifier}: contact probability")
            figure.colorbar(image, ax=axes)
            figure.tight_layout()
            figure.savefig(paths[identifier], dpi=100)
            plt.close(figure)
    return list(paths.values())
