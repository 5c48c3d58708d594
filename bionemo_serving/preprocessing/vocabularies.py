"""The token vocabularies of the served models, in id order."""

from __future__ import annotations

from pathlib import Path


def read_vocabulary(path: Path) -> tuple[str, ...]:
    """A vocabulary file: one token per line, in id order (tokens may contain spaces, as `LogD_change_(-0.1, 0.1]`)."""
    return tuple(line.strip() for line in path.read_text().splitlines() if line.strip())


# fair-esm's Alphabet.from_architecture("ESM-1b"), used by ESM-1nv and ESM-2nv:
# 33 tokens, <cls> first, <mask> last.
ESM_ALPHABET: tuple[str, ...] = (
    "<cls>", "<pad>", "<eos>", "<unk>",
    "L", "A", "G", "V", "S", "E", "R", "T", "I", "D", "P", "K", "Q", "N", "F", "Y", "M", "H", "W", "C",
    "X", "B", "U", "Z", "O", ".", "-",
    "<null_1>", "<mask>",
)  # fmt: skip

# Rostlab/prot_t5_xl_uniref50's sentencepiece vocabulary (its get_vocab() in ProtTrans issue #42) without its 100
# <extra_id_N> sentinels, which T5's tokenizer appends (ids 28..127).
PROTT5_BASE_VOCABULARY: tuple[str, ...] = (
    "<pad>", "</s>", "<unk>",
    "▁A", "▁L", "▁G", "▁V", "▁S", "▁R", "▁E", "▁D", "▁T", "▁I", "▁P", "▁K", "▁F", "▁Q", "▁N", "▁Y",
    "▁M", "▁H", "▁W", "▁C", "▁X", "▁B", "▁O", "▁U", "▁Z",
)  # fmt: skip
PROTT5_EXTRA_IDS = 100
PROTT5_TOKENS: tuple[str, ...] = PROTT5_BASE_VOCABULARY + tuple(
    f"<extra_id_{n}>" for n in reversed(range(PROTT5_EXTRA_IDS))
)
