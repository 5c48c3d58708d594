"""Triton python-backend model: a seq2seq decoder that keeps each row's key-value cache between calls.

The exporter copies this file into `<repository>/<model>/<version>/model.py` for
model_catalog's DECODER graph, and `runtimes/engines.py` beside it as `engines.py`; tensor names, dtypes,
the graph's two parts, the runtime that runs them (`runtime`, recorded by
`bionemo_serving.runtimes.choice`; onnxruntime where none is), threads and the provider
come from its `config.pbtxt`. The service's decode batcher calls it once
per step with one token for each row of every decoding in flight. For each row
it keeps the cross-attention keys and values of the row's source (computed once)
and the self-attention keys and values of the tokens decoded so far, so that a
step costs one token per row, not its prefix.

Every row gets a new id at every step and names its parent. The rows of one
client (one decode batcher) form a stream, kept in the slots of arrays that
the runtime reads as they are: a step copies no cache. A row continuing its
parent keeps the parent's slot; a row forking from a parent that another row
continues (beam search) copies the parent's slot; a row of the stream that the
call does not continue is dropped, and the last slot moves into the gap. A call
releasing every row of its stream, or a stream left unused for `idle_seconds`
(its client vanished), is forgotten. The caches live in this one process: the
config asks for one instance, and a restarted tritonserver has forgotten every
cache (a call naming one gets an error, which the service answers with a 503).
`initialize` decodes one step of one row before Triton calls the model ready, and
forgets it: a part its runtime cannot open or run fails the load, with the
runtime's own reason, instead of the first request.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).parent))  # engines.py, which the exporter copies beside this file
from engines import RUNTIME_PARAMETER, Arena, FreedMemory, Runtime, open_engine, thread_allotment  # noqa: E402


class CacheError(Exception):
    """A call that does not fit the caches held: answered as an error, the caches unchanged."""


def _grown(array: np.ndarray, axis: int, size: int) -> np.ndarray:
    """`array` with `axis` at least `size` long (doubling), zero-filled beyond its old content."""
    if array.shape[axis] >= size:
        return array
    shape = list(array.shape)
    shape[axis] = max(size, 2 * array.shape[axis])
    grown = np.zeros(shape, dtype=array.dtype)
    grown[tuple(slice(0, length) for length in array.shape)] = array
    return grown


@dataclass(eq=False)
class Stream:
    """One client's rows: slot i holds row `ids[i]`; the runtime reads the first len(ids) slots of each array."""

    arrays: dict[str, np.ndarray]
    """The step's inputs but token and position, slot first: per-layer keys and values, self_mask, encoder_mask."""
    lengths: np.ndarray
    """[slots] tokens decoded by each row: its cache's filled positions."""
    ids: list[int]
    used: float

    @classmethod
    def laid_out_as(cls, cross_kv: np.ndarray, mask_dtype: np.dtype, now: float) -> Stream:
        """An empty stream whose caches have the layers, heads and head size of cross_attention's output `cross_kv`
        [rows, layers, 2, heads, source, head_dim], which every runtime's step takes (model_catalog.DECODER)."""
        layers, _, heads, _, head_dim = cross_kv.shape[1:]
        arrays = {name: np.zeros((1, 1), dtype=mask_dtype) for name in ("self_mask", "encoder_mask")}
        for kind in ("self_keys", "self_values", "cross_keys", "cross_values"):
            for layer in range(layers):
                arrays[f"{kind}_{layer}"] = np.zeros((1, heads, 1, head_dim), dtype=cross_kv.dtype)
        return cls(arrays, np.zeros(1, dtype=np.int64), [], now)

    def reserve(self, slots: int, positions: int, width: int) -> None:
        self.lengths = _grown(self.lengths, 0, slots)
        for name, array in self.arrays.items():
            axis = array.ndim - 2 if array.ndim > 2 else 1  # [slots, heads, positions, head_dim] or [slots, positions]
            self.arrays[name] = _grown(_grown(array, 0, slots), axis, width if _is_source(name) else positions)

    def copy_slot(self, source: int, target: int) -> None:
        for array in (self.lengths, *self.arrays.values()):
            array[target] = array[source]


def _is_source(name: str) -> bool:
    """Whether a step input runs along the source (cross-attention) rather than the decoded tokens."""
    return name.startswith(("cross_", "encoder_"))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.inputs = {
            tensor["name"]: pb_utils.triton_string_to_numpy(tensor["data_type"]) for tensor in config["input"]
        }
        (logits,) = config["output"]
        self.logits_dtype = pb_utils.triton_string_to_numpy(logits["data_type"])
        self.vocab_size = int(logits["dims"][-1])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        folder = Path(args["model_repository"]) / args["model_version"]
        runtime = Runtime(parameters.get(RUNTIME_PARAMETER, Runtime.ONNXRUNTIME.value))
        provider, arena = parameters["execution_provider"], Arena(parameters["arena"])
        self.cross_attention, self.step = (
            open_engine(runtime, folder / runtime.file(Path(parameters[f"{part}_file"]).stem), provider, arena)
            for part in ("cross_attention", "step")
        )
        # One instance runs every step: with 0, the cores it shares with the encoders busy at the moment.
        self.threads = thread_allotment(int(parameters["intra_op_threads"]))
        self.idle_seconds = float(parameters["idle_seconds"])
        self.stream_of: dict[int, Stream] = {}
        self.freed_memory = FreedMemory()
        self._warm_up(next(int(tensor["dims"][-1]) for tensor in config["input"] if tensor["name"] == "encoder_hidden_states"))

    def _warm_up(self, hidden_size: int) -> None:
        """One step of one row (id 0, starting) over a two-position source of zeros, through both parts; forgotten."""
        feeds = {
            "row_ids": np.zeros(1),
            "parent_ids": np.full(1, -1),
            "tokens": np.zeros(1),
            "encoder_hidden_states": np.zeros((1, 2, hidden_size)),
            "encoder_mask": np.ones((1, 2)),
            "released_ids": np.zeros(0),
        }
        self._decode(**{name: feeds[name].astype(dtype) for name, dtype in self.inputs.items()})
        self._forget(self.stream_of[0])

    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:
            feeds = {
                name: pb_utils.get_input_tensor_by_name(request, name).as_numpy().astype(dtype, copy=False)
                for name, dtype in self.inputs.items()
            }
            try:
                logits = self._decode(**feeds).astype(self.logits_dtype, copy=False)
            except CacheError as error:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))))
            else:
                responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("logits", logits)]))
        self._forget_idle(time.monotonic())
        self.freed_memory.release()
        return responses

    def _decode(
        self,
        row_ids: np.ndarray,
        parent_ids: np.ndarray,
        tokens: np.ndarray,
        encoder_hidden_states: np.ndarray,
        encoder_mask: np.ndarray,
        released_ids: np.ndarray,
    ) -> np.ndarray:
        starting = parent_ids < 0
        parents = parent_ids[~starting].tolist()
        self._check(row_ids, tokens, starting, parents, encoder_hidden_states, encoder_mask)
        continued = {self.stream_of[parent] for parent in parents}
        if len(continued) > 1:
            raise CacheError("parent_ids name rows of different clients' calls: each client decodes in calls of its own")
        stream = continued.pop() if continued else None
        # A call ends the other streams it releases rows of: a client whose decodings all finished or started anew.
        for ended in {self.stream_of[row] for row in released_ids.tolist() if row in self.stream_of} - {stream}:
            self._forget(ended)
        if not len(row_ids):
            return np.zeros((0, self.vocab_size), dtype=np.float32)
        now = time.monotonic()
        cross_kv = None
        if starting.any():  # once per source; a new stream, whose rows all start, takes its layout
            sources = {"encoder_hidden_states": encoder_hidden_states}
            with self.threads() as threads:
                (cross_kv,) = self.cross_attention.run(["cross_kv"], sources, threads)
        if stream is None:
            stream = Stream.laid_out_as(cross_kv, encoder_mask.dtype, now)
        slots = self._place(stream, parent_ids, cross_kv, encoder_mask)
        for row in stream.ids:
            del self.stream_of[row]
        stream.ids = [0] * len(slots)
        for row, slot in zip(row_ids.tolist(), slots):
            stream.ids[slot] = row
            self.stream_of[row] = stream
        stream.used = now
        return self._run(stream, tokens, slots)

    def _place(
        self, stream: Stream, parent_ids: np.ndarray, cross_kv: np.ndarray | None, encoder_mask: np.ndarray
    ) -> list[int]:
        """Give every row of the call a slot among the stream's first len(parent_ids): its parent's, a copy of it
        (a fork), or a fresh one for a starting row, which gets its row of `cross_kv`; returns each row's slot."""
        slot_of = {row: slot for slot, row in enumerate(stream.ids)}
        children_left = Counter(parent_ids[parent_ids >= 0].tolist())
        slots, forks, starts = [], [], []
        free = len(stream.ids)
        for parent in parent_ids.tolist():
            if parent >= 0:
                children_left[parent] -= 1
            if parent >= 0 and not children_left[parent]:
                slots.append(slot_of[parent])  # the last row to extend a parent takes its slot
                continue
            slots.append(free)
            if parent >= 0:
                forks.append((slot_of[parent], free))
            else:
                starts.append(free)
            free += 1
        widths = [int(np.flatnonzero(mask)[-1]) + 1 for mask in encoder_mask]
        positions = 1 + max([0] + [int(stream.lengths[slot]) for slot in slots if slot < len(stream.ids)])
        stream.reserve(free, positions, max([1, *widths]))
        for parent_slot, slot in forks:
            stream.copy_slot(parent_slot, slot)
        if cross_kv is not None:
            for slot, row_kv, mask, width in zip(starts, cross_kv, encoder_mask, widths):
                stream.lengths[slot] = 0
                stream.arrays["self_mask"][slot] = 0
                stream.arrays["encoder_mask"][slot] = 0
                stream.arrays["encoder_mask"][slot, :width] = mask[:width]
                for layer in range(len(row_kv)):
                    for index, kind in enumerate(("keys", "values")):
                        cache = stream.arrays[f"cross_{kind}_{layer}"]
                        cache[slot] = 0
                        cache[slot, :, :width] = row_kv[layer, index, :, :width]
        # Rows past the first len(slots) move into the slots of the rows the call dropped.
        rows = len(slots)
        holes = sorted(set(range(rows)) - set(slots))
        moved = dict(zip(sorted(slot for slot in slots if slot >= rows), holes))
        for source, target in moved.items():
            stream.copy_slot(source, target)
        return [moved.get(slot, slot) for slot in slots]

    def _run(self, stream: Stream, tokens: np.ndarray, slots: list[int]) -> np.ndarray:
        """One step over the stream's first len(slots) slots, read in place; each row's logits in call order."""
        rows = len(slots)
        positions = stream.lengths[:rows].copy()
        in_slot_order = np.empty(rows, dtype=np.int64)
        in_slot_order[slots] = tokens
        feeds = {name: array[:rows] for name, array in stream.arrays.items()}
        inputs = feeds | {"token": in_slot_order, "position": positions}
        with self.threads() as threads:
            logits, token_kv = self.step.run(["logits", "token_kv"], inputs, threads)
        every_row = np.arange(rows)
        for layer in range(token_kv.shape[1]):
            for index, kind in enumerate(("keys", "values")):
                stream.arrays[f"self_{kind}_{layer}"][every_row, :, positions] = token_kv[:, layer, index, :, 0]
        stream.arrays["self_mask"][every_row, positions] = 1
        stream.lengths[:rows] += 1
        return logits[slots]

    def _check(
        self,
        row_ids: np.ndarray,
        tokens: np.ndarray,
        starting: np.ndarray,
        parents: list[int],
        encoder_hidden_states: np.ndarray,
        encoder_mask: np.ndarray,
    ) -> None:
        if not len(row_ids) == len(tokens) == len(starting):
            raise CacheError(f"row_ids, parent_ids and tokens differ in length: {len(row_ids)}, {len(starting)}, {len(tokens)}")
        if len(set(row_ids.tolist())) < len(row_ids) or self.stream_of.keys() & set(row_ids.tolist()):
            raise CacheError("row_ids must be new and distinct: every call names each row anew")
        if not int(starting.sum()) == len(encoder_hidden_states) == len(encoder_mask):
            raise CacheError(
                f"{int(starting.sum())} rows start (parent -1) but encoder_hidden_states has "
                f"{len(encoder_hidden_states)} sources and encoder_mask {len(encoder_mask)}"
            )
        if encoder_mask.shape != encoder_hidden_states.shape[:2] or not encoder_mask.any(axis=1).all():
            raise CacheError("every encoder_mask row needs a 1 and the width of its encoder_hidden_states")
        unknown = sorted(set(parents) - self.stream_of.keys())
        if unknown:
            raise CacheError(
                f"no cache for parent ids {unknown[:4]}: released, unused for {self.idle_seconds:.0f} s, "
                f"or tritonserver restarted"
            )

    def _forget(self, stream: Stream) -> None:
        for row in stream.ids:
            del self.stream_of[row]
        stream.ids = []

    def _forget_idle(self, now: float) -> None:
        for stream in {stream for stream in self.stream_of.values() if now - stream.used > self.idle_seconds}:
            self._forget(stream)
