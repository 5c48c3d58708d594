"""Reading every input format: ids kept, multi-line and lower-case FASTA, bad records in their place."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bionemo_client.records import InputError, Record, Unreadable, count, read


def test_fasta_keeps_ids_joins_lines_and_upper_cases_proteins(tmp_path: Path) -> None:
    path = tmp_path / "in.fasta"
    path.write_text(">sp|P1|ONE first protein\nmkta\nYIAK\n\n>two\nMSLK\n>empty\n>three desc\nmq rs\n")
    items = list(read(path, normalize=str.upper))
    assert items == [
        Record(0, "sp|P1|ONE", "MKTAYIAK", 1),
        Record(1, "two", "MSLK", 5),
        Unreadable(2, "empty", 7, "no residues after its header"),
        Record(3, "three", "MQRS", 8),
    ]
    assert count(path) == 4


def test_residues_before_any_header_are_a_bad_record_not_a_stop(tmp_path: Path) -> None:
    path = tmp_path / "in.fa"
    path.write_text("MKT\n>a\nMSL\n")
    assert [type(item).__name__ for item in read(path)] == ["Unreadable", "Record"]


@pytest.mark.parametrize("delimiter, suffix", [(",", ".csv"), ("\t", ".tsv")])
def test_tables_read_id_and_sequence_columns(tmp_path: Path, delimiter: str, suffix: str) -> None:
    path = tmp_path / f"in{suffix}"
    path.write_text(delimiter.join(["id", "sequence", "note"]) + "\n" + "\n".join(
        delimiter.join(row) for row in [["a", "mkt", "x"], ["b", "", "y"], ["", "MSL", "z"]]) + "\n")
    assert list(read(path, normalize=str.upper)) == [
        Record(0, "a", "MKT", 2), Unreadable(1, "b", 3, "empty sequence cell"), Record(2, "row3", "MSL", 4)
    ]


def test_a_table_without_a_sequence_column_is_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,seq\na,MKT\n")
    with pytest.raises(InputError, match="no `sequence` or `smiles` column; its columns: id, seq"):
        list(read(path))


def test_parquet_is_read_in_batches_with_its_ids(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(5000)], "sequence": ["MKT"] * 5000}), path)
    items = list(read(path))
    assert len(items) == 5000 and items[4999] == Record(4999, "p4999", "MKT", 5000)
    assert count(path) == 5000


def test_smi_names_molecules_and_smiles_keep_their_case(tmp_path: Path) -> None:
    path = tmp_path / "in.smi"
    path.write_text("c1ccccc1O phenol\n\nCCO\n")
    assert list(read(path)) == [Record(0, "phenol", "c1ccccc1O", 1), Record(1, "line3", "CCO", 3)]


def test_plain_text_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("MKT\n\nmsl\n")
    assert list(read(path, normalize=str.upper)) == [Record(0, "line1", "MKT", 1), Record(1, "line3", "MSL", 3)]


def test_an_unknown_suffix_asks_for_the_format(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="give --format"):
        list(read(tmp_path / "in.dat"))
