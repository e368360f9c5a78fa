"""Embedders: the protocol, a deterministic offline hashing embedder, and an HTTP client for
OpenAI-compatible ``/v1/embeddings`` endpoints (e.g. self-hosted BGE-M3 behind agentgateway)."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import re
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Protocol, Self, runtime_checkable

from .errors import InvalidInput, ProviderError, ReasonCode

if TYPE_CHECKING:
    import httpx

__all__ = ["Embedder", "HashingEmbedder", "OpenAICompatibleEmbedder"]

_log = logging.getLogger("kagent_governed_memory.embedding")

_TOKEN = re.compile(r"\w+", re.UNICODE)


@runtime_checkable
class Embedder(Protocol):
    dimension: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashingEmbedder:
    """Feature hashing of lower-cased word unigrams and bigrams, L2-normalised.

    Deterministic and offline: a fact is found by a query that shares its words.  For demos and
    tests; not a semantic model.
    """

    def __init__(self, dimension: int = 768) -> None:
        self.dimension = dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]

    def embed_one(self, text: str) -> list[float]:
        vec = [0.0] * self.dimension
        tokens = [t.lower() for t in _TOKEN.findall(text)]
        features = tokens + [a + " " + b for a, b in itertools.pairwise(tokens)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode("utf-8", "replace"), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "big") % self.dimension
            vec[index] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0.0:
            vec[0] = 1.0  # a constant direction for text without words
            return vec
        return [v / norm for v in vec]


class OpenAICompatibleEmbedder:
    """Embeds through an OpenAI-compatible ``POST /v1/embeddings`` endpoint, fail-closed.

    ``dimension`` is what the model produces (set ``MemoryPolicy.embedding_dimension`` to the
    same): a vector of any other length refuses the whole batch, so no model is truncated to a
    size it was not trained for.  ``fit="truncate"`` is kagent's ``KAgentEmbedding`` rule for
    768-d compatibility with upstream rows (longer: truncate, then L2-renormalise; shorter:
    refuse).
    Unlike kagent, a failure raises instead of returning ``[]``, and every failure is one
    content-free ``ProviderError`` (reason and HTTP status only): texts, response bodies and
    transport messages never reach the error, its chain or a log record (B6).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        dimension: int = 768,
        fit: Literal["exact", "truncate"] = "exact",
        api_key: str | None = None,
        timeout: float = 10.0,
        client: httpx.AsyncClient | None = None,
        max_batch: int = 64,
    ) -> None:
        import httpx  # optional dependency: only this embedder needs it

        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="base_url")
        if not isinstance(model, str) or not model:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="model")
        if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="max_batch")
        if (not isinstance(dimension, int) or isinstance(dimension, bool)
                or not 1 <= dimension <= 16_000):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="dimension")
        if fit not in ("exact", "truncate"):
            raise InvalidInput(ReasonCode.INVALID_ARGUMENT, field="fit")
        self.dimension = dimension
        self._truncate = fit == "truncate"
        root = base_url.rstrip("/")
        self._url = root + ("/embeddings" if root.endswith("/v1") else "/v1/embeddings")
        self._model = model
        self._timeout = timeout
        self._max_batch = max_batch
        # The key lives only in this header map; __repr__ says whether one is set, never which.
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=timeout)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model={self._model!r}, dimension={self.dimension}, "
                f"max_batch={self._max_batch}, api_key={'set' if self._headers else None})")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; sent in batches of at most ``max_batch``."""
        # A bare string would be embedded character by character, one paid item each.
        items = [] if isinstance(texts, str) else list(texts)
        if isinstance(texts, str) or not all(isinstance(t, str) for t in items):
            raise InvalidInput(ReasonCode.INVALID_TEXT, operation="embed")
        vectors: list[list[float]] = []
        for start in range(0, len(items), self._max_batch):
            vectors.extend(await self._embed_batch(items[start:start + self._max_batch]))
        return vectors

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        status: int | None = None
        vectors: list[list[float]] | None = None
        try:
            response = await self._client.post(
                self._url,
                json={"model": self._model, "input": batch},
                headers=self._headers,
                timeout=self._timeout,
            )
            status = response.status_code
            if response.is_success:
                vectors = _parse(response.content, len(batch), self.dimension, self._truncate)
        except Exception:  # noqa: BLE001 - fail closed; any message may echo the body or texts
            vectors = None
        if vectors is None:
            # Raised outside the handler (and ``from None``) so no exception carrying content
            # becomes this error's __context__ or __cause__.
            _log.warning("embedding failed status=%s items=%d", status, len(batch))
            ids: dict[str, str | int] = {"operation": "embed"}
            if status is not None:
                ids["status"] = status
            raise ProviderError(ReasonCode.EMBEDDING_FAILED, **ids) from None
        return vectors

    async def aclose(self) -> None:
        """Close the HTTP client if this embedder created it; a caller's client stays open."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _parse(body: bytes, count: int, dimension: int, truncate: bool
           ) -> list[list[float]] | None:
    """``data[*].embedding`` ordered by ``index``, exactly one per input, each fitted; else None."""
    payload = json.loads(body)
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) != count:
        return None
    by_index: dict[int, object] = {}
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < count or index in by_index:
            return None
        by_index[index] = item.get("embedding")
    vectors: list[list[float]] = []
    for i in range(count):  # count distinct indices in range(count): every one is present
        vec = _fit(by_index[i], dimension, truncate)
        if vec is None:
            return None
        vectors.append(vec)
    return vectors


def _fit(raw: object, dimension: int, truncate: bool) -> list[float] | None:
    """Validate one vector: exactly ``dimension`` numbers, or (``truncate``, kagent's rule) at
    least that many, cut and renormalised; None if unusable."""
    if not isinstance(raw, list) or len(raw) < dimension:
        return None
    if len(raw) > dimension and not truncate:
        return None
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in raw):
        return None
    vec = [float(v) for v in raw]  # OverflowError on a huge int is caught by the caller
    if not all(math.isfinite(v) for v in vec):
        return None
    if len(vec) > dimension:
        vec = vec[:dimension]
        norm = math.hypot(*vec)
        if norm == 0.0 or not math.isfinite(norm):
            return None
        vec = [v / norm for v in vec]
    elif not any(vec):  # a zero vector has no direction: cosine search on it is undefined
        return None
    return vec
