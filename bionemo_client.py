"""Command-line client in the spirit of BioNeMo's client_encode and client_decode (standard library only).

    python bionemo_client.py encode --model esm2nv --what embeddings --out emb.npz MKTAYIAKQR MSLK
    python bionemo_client.py encode --model megamolbart --what hiddens --out latents.npz CCO c1ccccc1
    python bionemo_client.py decode latents.npz
    python bionemo_client.py generate --num-samples 5 --seed 1 CCO

Sequences come as arguments, or one per line from --input FILE. --url picks the service.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np


class ServiceError(RuntimeError):
    """The service answered with an error; the message is its JSON error body."""


def call(url: str, path: str, body: Any) -> Any:
    request = urllib.request.Request(
        f"{url.rstrip('/')}{path}", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        raise ServiceError(f"{path}: HTTP {error.code}: {error.read().decode(errors='replace')}") from None


def encode(url: str, model: str, what: str, sequences: list[str], out: Path) -> Path:
    """Embeddings [batch, dim] or hidden states [batch, length, dim] with their mask, saved as .npz."""
    if what == "embeddings":
        arrays = {"embeddings": np.asarray(call(url, "/embed/ndarray", {"model": model, "sequences": sequences}), np.float32)}
    else:
        answer = call(url, "/hidden", {"model": model, "sequences": sequences})
        arrays = {"hiddens": np.asarray(answer["hiddens"], np.float32), "mask": np.asarray(answer["mask"], np.int64)}
    np.savez(out, sequences=np.asarray(sequences), model=np.asarray(model), **arrays)
    return out


def decode(url: str, path: Path, max_length: int) -> list[str]:
    """SMILES from hidden states saved by `encode --what hiddens`."""
    saved = np.load(path)
    body = {"model": str(saved["model"]), "hiddens": saved["hiddens"].tolist(), "mask": saved["mask"].tolist(), "max_length": max_length}
    return call(url, "/decode", body)["smiles"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:3000")
    commands = parser.add_subparsers(dest="command", required=True)
    encode_parser = commands.add_parser("encode", help="embeddings or hidden states of sequences, saved to .npz")
    encode_parser.add_argument("--model", default="esm2nv")
    encode_parser.add_argument("--what", choices=["embeddings", "hiddens"], default="embeddings")
    encode_parser.add_argument("--out", type=Path, required=True)
    decode_parser = commands.add_parser("decode", help="SMILES from a .npz written by encode --what hiddens")
    decode_parser.add_argument("file", type=Path)
    decode_parser.add_argument("--max-length", type=int, default=128)
    generate_parser = commands.add_parser("generate", help="molecules around seed SMILES, as JSON")
    generate_parser.add_argument("--num-samples", type=int, default=10)
    generate_parser.add_argument("--scaled-radius", type=float, default=1.0)
    generate_parser.add_argument("--method", choices=["greedy", "topkp", "beam"], default="greedy")
    generate_parser.add_argument("--seed", type=int)
    for command in (encode_parser, generate_parser):
        command.add_argument("inputs", nargs="*", help="sequences or SMILES")
        command.add_argument("--input", type=Path, help="a file with one sequence or SMILES per line")
    args = parser.parse_args(argv)
    inputs = getattr(args, "inputs", [])
    if getattr(args, "input", None):
        inputs += [line.strip() for line in args.input.read_text().splitlines() if line.strip()]
    try:
        if args.command == "encode":
            print(f"wrote {encode(args.url, args.model, args.what, inputs, args.out)}")
        elif args.command == "decode":
            print("\n".join(decode(args.url, args.file, args.max_length)))
        else:
            body = {"smiles": inputs, "num_samples": args.num_samples, "scaled_radius": args.scaled_radius, "method": args.method}
            if args.seed is not None:
                body["seed"] = args.seed
            print(json.dumps(call(args.url, "/generate", body), indent=2))
    except (ServiceError, urllib.error.URLError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
