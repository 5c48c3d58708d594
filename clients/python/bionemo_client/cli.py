"""`bionemo-client`: files in, files out, over the Python API (client.py).

    bionemo-client embed proteins.fasta -o embeddings.parquet --layers -1 0
    bionemo-client logits proteins.fasta -o logits.parquet
    bionemo-client score --scan proteins.fasta -o scan.csv --heatmap scan.png
    bionemo-client score variants.csv --wild-type wt.fasta -o scores.parquet
    bionemo-client contacts proteins.fasta -o contacts.parquet --plot contacts.png
    bionemo-client embed molecules.smi -o latents.parquet --model megamolbart --per-token
    bionemo-client decode latents.parquet -o smiles.csv
    bionemo-client generate molecules.smi -o generated.csv --num-samples 5 --seed 1

Inputs: FASTA, CSV/TSV or Parquet with `id` and `sequence` (or `smiles`) columns, `.smi`, text one per line.
A record the service refuses goes to OUTPUT's errors file (`out.errors.csv`: id, line, reason) and the rest goes
on. A run stopped at any point resumes when started again with the same command. Exit status: 0 every record done,
1 the job stopped (run it again to resume), 2 a usage or input error, 3 done but records refused (see the errors
file; as rsync's partial transfer, so that a pipeline does not go on as if the output were whole).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from bionemo_client.client import Client
from bionemo_client.jobs import JobFailed
from bionemo_client.journal import JournalMismatch
from bionemo_client.records import FORMATS, InputError, file_format
from bionemo_client.service import ServiceError


PARTIAL = 3
"""The exit status of a job that finished with records refused."""


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default="http://127.0.0.1:3000", help="the service (default: %(default)s)")
    common.add_argument("-o", "--output", type=Path, required=True, help=".parquet, .csv, .tsv or .npz, as the command allows")
    common.add_argument("--format", choices=FORMATS, help="the input's format, where its name does not say it")
    common.add_argument("--concurrency", type=int, default=4, help="requests in flight (default: %(default)s)")
    common.add_argument("--retries", type=int, default=8, help="resends of a request after a 429, 503 or 504 (default: %(default)s)")
    common.add_argument("--client-id", help="who the service shares its time fairly with others as (default: user@host)")
    common.add_argument("--restart", action="store_true", help="discard a killed run's partial results instead of resuming")
    common.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                        help="no progress bar, even on a terminal (there is none on a pipe)")  # fmt: skip
    parser = argparse.ArgumentParser(prog="bionemo-client", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    embed = commands.add_parser("embed", parents=[common], help="an embedding per protein or SMILES")
    embed.add_argument("input", type=Path)
    embed.add_argument("--model", default=None, help="default: esm2nv (megamolbart for .smi, .smi.gz or --format smi)")
    embed.add_argument("--layers", type=int, nargs="+", help="hidden-state layers (0: embeddings, -1: the last)")
    embed.add_argument("--pooling", choices=["mean", "cls"], default="mean")
    embed.add_argument("--normalize", action="store_true", help="unit-length embeddings")
    embed.add_argument("--per-token", action="store_true", help="every token's hidden state (a molecule's latent for decode)")

    for name, summary in (("logits", "log-probabilities of the 20 amino acids at every residue"),
                          ("contacts", "contact maps")):  # fmt: skip
        command = commands.add_parser(name, parents=[common], help=summary)
        command.add_argument("input", type=Path)
        command.add_argument("--model", default="esm2nv")
    commands.choices["contacts"].add_argument("--plot", type=Path, help="a PNG of each contact map")

    score = commands.add_parser("score", parents=[common], help="variant effects: a mutations file, or --scan")
    score.add_argument("input", type=Path, help="with --scan: proteins; else variants (A23G or A23G:K45R), one per record")
    score.add_argument("--scan", action="store_true", help="every single substitution of each protein")
    score.add_argument("--wild-type", help="the variants' wild type: a sequence or a FASTA file (without --scan)")
    score.add_argument("--model", default="esm2nv")
    score.add_argument("--method", choices=["masked-marginal", "wildtype-marginal", "pseudo-likelihood"], default="masked-marginal")
    score.add_argument("--window", type=int, default=32, help="--scan: residues a request (default: %(default)s)")
    score.add_argument("--heatmap", type=Path, help="--scan: a PNG of positions x amino acids per protein")

    decode = commands.add_parser("decode", parents=[common], help="SMILES from latents written by embed --per-token")
    decode.add_argument("input", type=Path)
    decode.add_argument("--model", default="megamolbart")
    decode.add_argument("--max-length", type=int, default=128)

    generate = commands.add_parser("generate", parents=[common], help="molecules around seed SMILES")
    generate.add_argument("input", type=Path)
    generate.add_argument("--model", default="megamolbart")
    generate.add_argument("--num-samples", type=int, default=10)
    generate.add_argument("--method", choices=["greedy", "topkp", "beam"], default="greedy")
    generate.add_argument("--scaled-radius", type=float, default=1.0)
    generate.add_argument("--seed", type=int)
    generate.add_argument("--temperature", type=float)
    generate.add_argument("--top-k", type=int)
    generate.add_argument("--top-p", type=float)
    generate.add_argument("--beam-size", type=int)
    generate.add_argument("--max-length", type=int)
    return parser


def _run(client: Client, args: argparse.Namespace) -> Any:
    job = {"format": args.format, "restart": args.restart, "progress": args.progress}
    if args.command == "embed":
        model = args.model or ("megamolbart" if file_format(args.input, args.format) == "smi" else "esm2nv")
        return client.embed_file(args.input, args.output, model=model, layers=args.layers, pooling=args.pooling,
                                 normalize=args.normalize, per_token=args.per_token, **job)  # fmt: skip
    if args.command == "logits":
        return client.logits_file(args.input, args.output, model=args.model, **job)
    if args.command == "contacts":
        return client.contacts_file(args.input, args.output, model=args.model, plot=args.plot, **job)
    if args.command == "score":
        if args.scan:
            return client.scan_file(args.input, args.output, model=args.model, method=args.method,
                                    window=args.window, heatmap=args.heatmap, **job)  # fmt: skip
        if not args.wild_type:
            raise InputError("score: give --scan, or the variants' --wild-type")
        return client.score_file(args.input, args.output, wild_type=args.wild_type, model=args.model,
                                 method=args.method, **job)  # fmt: skip
    if args.command == "decode":
        job.pop("format")
        return client.decode_file(args.input, args.output, model=args.model, max_length=args.max_length, **job)
    options = {name: getattr(args, name) for name in ("temperature", "top_k", "top_p", "beam_size", "max_length")
               if getattr(args, name) is not None}  # fmt: skip
    return client.generate_file(args.input, args.output, model=args.model, num_samples=args.num_samples,
                                method=args.method, scaled_radius=args.scaled_radius, seed=args.seed,
                                **options, **job)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # The C library's allocator gives freed pages back; Arrow's default pool (mimalloc) kept about 50 MB more at the
    # end of a job, where the output is written (benchmarks/client_files.py).
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        with Client(args.url, concurrency=args.concurrency, retries=args.retries, client_id=args.client_id) as client:
            summary = _run(client, args)
    except (InputError, JournalMismatch, ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (JobFailed, ServiceError) as error:
        print(f"error: {error}\nwhat was done is kept: run the same command again to resume", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    print(summary.line(), file=sys.stderr)
    return PARTIAL if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
