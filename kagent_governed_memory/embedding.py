"""Embedders: the protocol and a deterministic, offline hashing embedder."""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Embedder", "HashingEmbedder"]

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
