"""Triton python-backend model: a seq2seq decoder that keeps each row's key-value cache between calls.

The exporter copies this file into `<repository>/<model>/<version>/model.py` for
model_catalog's DECODER graph; tensor names, dtypes, ONNX files, threads and the
provider come from its `config.pbtxt`. The service's decode batcher calls it once
per step with one token for each row of every decoding in flight. Per row id it
keeps the cross-attention keys and values of the row's source (computed once,
shared by the beams forked from it) and the self-attention keys and values of
the tokens decoded so far, so that a step costs one token per row, not its prefix.

Every row gets a new id at every step and names its parent: it continues the
parent's cache, moved when the same call releases the parent and no other row
forks from it, copied otherwise (beams fork). A call releases the caches it is
done with; a cache left unused for `idle_seconds` (its client vanished) is
forgotten. The caches live in this one process: the config asks for one
instance, and a restarted tritonserver has forgotten every cache (a call naming
one gets an error, which the service answers with a 503).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils


class CacheError(Exception):
    """A call that does not fit the caches held: answered as an error, the caches unchanged."""


@dataclass
class RowCache:
    cross_kv: np.ndarray
    """[layers, 2, heads, source, head_dim], shared by every row decoding the same source."""
    encoder_mask: np.ndarray
    """[source]"""
    self_kv: np.ndarray
    """[layers, 2, heads, capacity, head_dim]: the first `length` positions hold the decoded tokens'."""
    length: int
    used: float

    def fork(self) -> RowCache:
        self_kv = np.empty_like(self.self_kv)
        self_kv[:, :, :, : self.length] = self.self_kv[:, :, :, : self.length]
        return RowCache(self.cross_kv, self.encoder_mask, self_kv, self.length, self.used)

    def append(self, token_kv: np.ndarray, now: float) -> None:
        """Add the newest token's keys and values [layers, 2, heads, head_dim], growing by doubling."""
        if self.length == self.self_kv.shape[3]:
            shape = list(self.self_kv.shape)
            shape[3] = 2 * self.length
            grown = np.empty(shape, dtype=self.self_kv.dtype)
            grown[:, :, :, : self.length] = self.self_kv
            self.self_kv = grown
        self.self_kv[:, :, :, self.length] = token_kv
        self.length += 1
        self.used = now


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
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = int(parameters["intra_op_threads"])
        providers = [parameters["execution_provider"]]
        self.cross_attention = onnxruntime.InferenceSession(
            str(folder / parameters["cross_attention_file"]), options, providers=providers
        )
        self.step = onnxruntime.InferenceSession(str(folder / parameters["step_file"]), options, providers=providers)
        self.idle_seconds = float(parameters["idle_seconds"])
        self.rows: dict[int, RowCache] = {}

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
        now = time.monotonic()
        released = set(released_ids.tolist())
        sources = iter(self._start(encoder_hidden_states, encoder_mask, now))
        children_left = Counter(parents)
        caches = []
        for parent in parent_ids.tolist():
            if parent < 0:
                caches.append(next(sources))
                continue
            children_left[parent] -= 1
            cache = self.rows[parent]
            caches.append(cache if parent in released and not children_left[parent] else cache.fork())
        logits = np.zeros((0, self.vocab_size), dtype=np.float32)
        if caches:
            logits, token_kv = self._run(tokens, caches)
            for cache, row_kv in zip(caches, token_kv):
                cache.append(row_kv[:, :, :, 0], now)
        for row_id in released:
            self.rows.pop(row_id, None)
        self.rows.update(zip(row_ids.tolist(), caches))
        return logits

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
        if len(set(row_ids.tolist())) < len(row_ids) or self.rows.keys() & set(row_ids.tolist()):
            raise CacheError("row_ids must be new and distinct: every step names each row anew")
        if not int(starting.sum()) == len(encoder_hidden_states) == len(encoder_mask):
            raise CacheError(
                f"{int(starting.sum())} rows start (parent -1) but encoder_hidden_states has "
                f"{len(encoder_hidden_states)} sources and encoder_mask {len(encoder_mask)}"
            )
        if encoder_mask.shape != encoder_hidden_states.shape[:2] or not encoder_mask.any(axis=1).all():
            raise CacheError("every encoder_mask row needs a 1 and the width of its encoder_hidden_states")
        unknown = sorted(set(parents) - self.rows.keys())
        if unknown:
            raise CacheError(
                f"no cache for parent ids {unknown[:4]}: released, unused for {self.idle_seconds:.0f} s, "
                f"or tritonserver restarted"
            )

    def _start(self, encoder_hidden_states: np.ndarray, encoder_mask: np.ndarray, now: float) -> list[RowCache]:
        """A cache per starting row: its source's cross-attention keys and values, cut to the mask's last 1."""
        if not len(encoder_hidden_states):
            return []
        (cross_kv,) = self.cross_attention.run(["cross_kv"], {"encoder_hidden_states": encoder_hidden_states})
        caches = []
        for row_kv, mask in zip(cross_kv, encoder_mask):
            width = int(np.flatnonzero(mask)[-1]) + 1
            layers, _, heads, _, head_dim = row_kv.shape
            empty = np.empty((layers, 2, heads, 8, head_dim), dtype=row_kv.dtype)
            caches.append(RowCache(row_kv[:, :, :, :width].copy(), mask[:width].copy(), empty, 0, now))
        return caches

    def _run(self, tokens: np.ndarray, caches: list[RowCache]) -> tuple[np.ndarray, np.ndarray]:
        """One step of the ONNX graph for every row, caches right-padded to the longest."""
        past = max(cache.length for cache in caches)
        width = max(len(cache.encoder_mask) for cache in caches)
        layers, _, heads, _, head_dim = caches[0].cross_kv.shape
        self_kv = np.zeros((len(caches), layers, 2, heads, past, head_dim), dtype=np.float32)
        self_mask = np.zeros((len(caches), past), dtype=np.int64)
        cross_kv = np.zeros((len(caches), layers, 2, heads, width, head_dim), dtype=np.float32)
        encoder_mask = np.zeros((len(caches), width), dtype=np.int64)
        for row, cache in enumerate(caches):
            self_kv[row, :, :, :, : cache.length] = cache.self_kv[:, :, :, : cache.length]
            self_mask[row, : cache.length] = 1
            cross_kv[row, :, :, :, : len(cache.encoder_mask)] = cache.cross_kv
            encoder_mask[row, : len(cache.encoder_mask)] = cache.encoder_mask
        feeds = {
            "token": tokens,
            "position": np.array([cache.length for cache in caches], dtype=np.int64),
            "self_kv": self_kv,
            "self_mask": self_mask,
            "cross_kv": cross_kv,
            "encoder_mask": encoder_mask,
        }
        logits, token_kv = self.step.run(["logits", "token_kv"], feeds)
        return logits, token_kv

    def _forget_idle(self, now: float) -> None:
        idle = [row_id for row_id, cache in self.rows.items() if now - cache.used > self.idle_seconds]
        for row_id in idle:
            del self.rows[row_id]
