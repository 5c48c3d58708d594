"""Input files as a stream of records, in file order, one at a time (a file of a million sequences is never held).

FASTA (IDs kept, sequences over several lines, either case), CSV or TSV with `id` and `sequence` (or `smiles`)
columns, Parquet with the same columns, `.smi` (SMILES, then an optional name) and plain text, one per line.
A record the file itself gets wrong (a FASTA entry without residues, an empty cell) comes out as `Unreadable`, in
its place, so that it reaches the errors file with its line and the rest of the file goes on.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

FORMATS = ("fasta", "csv", "tsv", "parquet", "smi", "txt")
SUFFIXES = {
    ".fasta": "fasta", ".fa": "fasta", ".faa": "fasta", ".fas": "fasta", ".fna": "fasta",
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet", ".smi": "smi", ".txt": "txt",
}  # fmt: skip
TEXT_COLUMNS = ("sequence", "smiles")
"""The column a table's sequences are read from, whichever it has (`smiles` for molecules)."""


class InputError(ValueError):
    """The file cannot be read as a whole (an unknown format, a table without its columns): nothing is sent."""


@dataclass(frozen=True)
class Record:
    index: int
    """Its place among the file's records, from 0: what resume counts by."""
    id: str
    text: Any
    """The sequence or SMILES as it is sent (a str); for `decode`, a latent: a [tokens, dim] float32 array."""
    line: int
    """Where it starts in the file, from 1 (a Parquet file's row)."""


@dataclass(frozen=True)
class Unreadable:
    index: int
    id: str
    line: int
    reason: str


Item = Record | Unreadable


def file_format(path: Path, given: str | None = None) -> str:
    """`given`, else the format its suffix names (a trailing `.gz` is read through gzip)."""
    if given:
        return given
    suffixes = [suffix.lower() for suffix in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    if suffixes and suffixes[-1] in SUFFIXES:
        return SUFFIXES[suffixes[-1]]
    raise InputError(f"{path}: cannot tell its format from its name; give --format ({', '.join(FORMATS)})")


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix.lower() == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def read(
    path: Path, fmt: str | None = None, normalize: Callable[[str], str] = str, columns: tuple[str, ...] | None = None
) -> Iterator[Item]:
    """The records of `path` in order; `normalize` turns each text into what is sent (proteins: upper case);
    `columns`: the names a table's text column may have, the first found is read (default: TEXT_COLUMNS)."""
    readers = {"fasta": _fasta, "csv": _table, "tsv": _table, "parquet": _parquet, "smi": _lines, "txt": _lines}
    fmt = file_format(path, fmt)
    for item in readers[fmt](path, fmt, columns or TEXT_COLUMNS):
        if isinstance(item, Record):
            item = Record(item.index, item.id, normalize(item.text), item.line)
        yield item


def read_latents(path: Path) -> Iterator[Item]:
    """The `id` and `hiddens` of a Parquet file `embed --per-token` wrote: one [tokens, dim] latent per row."""
    table = pq.ParquetFile(path)
    if "hiddens" not in table.schema_arrow.names:
        raise InputError(f"{path}: has no `hiddens` column (write one with `embed --per-token --model megamolbart`)")
    index = 0
    for batch in table.iter_batches(batch_size=256, columns=[n for n in ("id", "hiddens") if n in table.schema_arrow.names]):
        values = batch.to_pydict()
        for identifier, latent in zip(values.get("id", [None] * batch.num_rows), values["hiddens"]):
            name = str(identifier) if identifier not in (None, "") else f"row{index + 1}"
            if not latent:
                yield Unreadable(index, name, index + 1, "empty latent")
            else:
                yield Record(index, name, np.asarray(latent, np.float32), index + 1)
            index += 1


def count(path: Path, fmt: str | None = None, columns: tuple[str, ...] | None = None) -> int:
    """How many records `read` yields, for the progress bar's total: one pass over the file, nothing kept."""
    fmt = file_format(path, fmt)
    if fmt == "parquet":
        return pq.ParquetFile(path).metadata.num_rows
    if fmt in ("csv", "tsv"):
        return sum(1 for _ in _table(path, fmt, columns or TEXT_COLUMNS))
    with _open_text(path) as lines:
        if fmt == "fasta":
            return sum(1 for line in lines if line.startswith(">"))
        return sum(1 for line in lines if line.strip())


def _fasta(path: Path, fmt: str, columns: tuple[str, ...]) -> Iterator[Item]:
    index, header, start, parts = 0, None, 0, []
    with _open_text(path) as lines:
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if line.startswith(">"):
                if header is not None:
                    yield _fasta_record(index, header, start, parts)
                    index += 1
                header, start, parts = line[1:].strip(), number, []
            elif line:
                if header is None:
                    yield Unreadable(index, f"line{number}", number, "residues before the first '>' header")
                    index += 1
                    continue
                parts.append(line)
    if header is not None:
        yield _fasta_record(index, header, start, parts)


def _fasta_record(index: int, header: str, line: int, parts: list[str]) -> Item:
    identifier = header.split()[0] if header.split() else f"record{index + 1}"
    sequence = "".join("".join(parts).split())
    if not sequence:
        return Unreadable(index, identifier, line, "no residues after its header")
    return Record(index, identifier, sequence, line)


def _table(path: Path, fmt: str, columns: tuple[str, ...]) -> Iterator[Item]:
    with _open_text(path) as handle:
        rows = csv.DictReader(handle, delimiter="\t" if fmt == "tsv" else ",")
        column = _text_column(path, rows.fieldnames or [], columns)
        for index, row in enumerate(rows):
            # the line the row ends on; a quoted cell may span lines
            yield _table_record(index, row.get("id"), row.get(column), rows.line_num)


def _parquet(path: Path, fmt: str, columns: tuple[str, ...]) -> Iterator[Item]:
    table = pq.ParquetFile(path)
    column = _text_column(path, table.schema_arrow.names, columns)
    names = [name for name in ("id", column) if name in table.schema_arrow.names]
    index = 0
    for batch in table.iter_batches(batch_size=4096, columns=names):
        values = batch.to_pydict()
        ids = values.get("id", [None] * batch.num_rows)
        for identifier, text in zip(ids, values[column]):
            yield _table_record(index, identifier, text, index + 1)
            index += 1


def _text_column(path: Path, names: list[str], columns: tuple[str, ...]) -> str:
    for name in columns:
        if name in names:
            return name
    wanted = " or ".join(f"`{name}`" for name in columns)
    raise InputError(f"{path}: has no {wanted} column; its columns: {', '.join(names) or 'none'}")


def _table_record(index: int, identifier: object, text: object, line: int) -> Item:
    name = str(identifier) if identifier not in (None, "") else f"row{index + 1}"
    if text is None or not str(text).strip():
        return Unreadable(index, name, line, "empty sequence cell")
    return Record(index, name, str(text).strip(), line)


def _lines(path: Path, fmt: str, columns: tuple[str, ...]) -> Iterator[Item]:
    """One text per line (blank lines skipped); `.smi` lines may name the molecule after the SMILES."""
    index = 0
    with _open_text(path) as lines:
        for number, line in enumerate(lines, 1):
            fields = line.split()
            if not fields:
                continue
            name = fields[1] if fmt == "smi" and len(fields) > 1 else f"line{number}"
            yield Record(index, name, fields[0] if fmt == "smi" else line.strip(), number)
            index += 1
