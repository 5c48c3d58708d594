"""/embed: tokenize, run the encoder through the Triton runner, pool over residues."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
from tritonclient.utils import InferenceServerException

from preprocessing import EsmTokenizer, SequenceError, mean_pool, tokenizer_for
from serving.errors import FieldProblem, InvalidRequest, ModelUnavailable, UnknownModel
from serving.protocol import EmbedRequest, EmbedResponse
from serving.triton_models import TritonModel


class EmbeddingEngine:
    """Turns validated requests into Triton calls; one instance per API worker."""

    def __init__(self, runner: Any, models: dict[str, TritonModel]) -> None:
        self.runner = runner
        self.models = models
        self.tokenizers: dict[str, EsmTokenizer] = {
            name: tokenizer_for(model.description) for name, model in models.items()
        }

    def _model(self, name: str) -> TritonModel:
        if name not in self.models:
            raise UnknownModel.at("model", f"{name!r} is not served; served models: {', '.join(sorted(self.models))}")
        return self.models[name]

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        model = self._model(request.model)
        tokenizer = self.tokenizers[request.model]
        encoded, problems = [], []
        for index, sequence in enumerate(request.sequences):
            try:
                encoded.append(tokenizer.encode(sequence, index))
            except SequenceError as error:
                problems.append(FieldProblem(f"sequences[{error.index}]", error.message))
        if problems:
            raise InvalidRequest(problems)
        # Sort by length before cutting into Triton-sized batches so that each
        # batch pads as little as possible; results go back in input order.
        order = sorted(range(len(encoded)), key=lambda index: len(encoded[index]))
        chunks = [order[start : start + model.max_batch_size] for start in range(0, len(order), model.max_batch_size)]
        pooled = await asyncio.gather(*(self._embed_chunk(model, tokenizer, [encoded[i] for i in chunk]) for chunk in chunks))
        embeddings = np.empty((len(encoded), pooled[0].shape[1]), dtype=np.float32)
        for chunk, vectors in zip(chunks, pooled):
            embeddings[chunk] = vectors
        return EmbedResponse(model=request.model, dim=embeddings.shape[1], embeddings=embeddings.tolist())

    async def _embed_chunk(self, model: TritonModel, tokenizer: EsmTokenizer, encoded: list[np.ndarray]) -> np.ndarray:
        batch = tokenizer.pad(encoded)
        hidden_states = await self._infer(model, batch.model_inputs())
        return mean_pool(hidden_states, batch.residue_mask)

    async def _infer(self, model: TritonModel, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """Run the model's single output; Triton being unreachable or not ready is a 503."""
        name = model.description.name
        try:
            result = await getattr(self.runner, name).async_run(*model.infer_inputs(arrays))
        except (InferenceServerException, aiohttp.ClientError, ConnectionError) as error:
            raise ModelUnavailable.at("model", f"{name} is not available right now: {error}") from None
        return result.as_numpy(model.description.output.name)
