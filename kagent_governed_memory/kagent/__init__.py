"""Kagent mode: governed memory through the patched kagent controller, no database login.

An agent pod runs model-chosen tools, so in a kagent cluster it should hold no credentials to
the memory database.  The patched controller (``patches/``) serves the governed SQL functions
over HTTP on its own listener (``KAGENT_MEMORY_URL``, default port 8085) and authorises two
kinds of caller separately, so this package has one object for each:

* ``KagentControllerStore`` — the agent runtime's ``RuntimeRepository``: redeem, admit, save,
  search (batched for prefetch), forget.  Every call carries the pod's projected ServiceAccount
  token, kagent's ``X-Agent-Name`` and the request's bridge-signed scope assertion
  (``x-kagent-memory-scope``), which the controller verifies on every call; the first
  (``redeem``) consumes it.  Give it to ``GovernedMemoryService`` in place of the database store.
* ``KagentBridgeStore`` — the bridge's ``ControlRepository``: consent, status, inspect, forget,
  forget all, withdraw, offboard, with the bridge's ServiceAccount token (a ServiceAccount
  listed in the controller's ``--governed-memory-bridge-service-accounts``).  Give it to
  ``MemoryControls``.

Both raise the library's errors with the API's reason codes; see ``_http`` for timeouts, retries
and what is logged.  Sweeping and the invariant report stay database-side operator work (the
controller sweeps expired rows on its own timer).

Layout: ``_stores`` holds the two stores, written against a transport's one call (a route, a
JSON-shaped body, the operation's name, whether a retry is safe), on ``_client``'s shared part,
which picks the transport; ``_http`` is the transport for the v0.9.x carry series' HTTP
listener, ``_grpc`` (with ``_grpc_codec``) the one for kagent main's gRPC service, and
``_transport`` what both share (token files, the bearer token source, bounds); ``_answers``
turns an answer into the library's models and a refusal into the library's errors, for every
transport alike.  ``protos`` gives kagent main's generated protocol buffers (the
``kagent-main`` extra).
"""

from ._stores import KagentBridgeStore, KagentControllerStore
from ._transport import (
    DEFAULT_DEADLINE,
    DEFAULT_TIMEOUT,
    GOVERNED_MEMORY_TOKEN_FILE_ENV,
    GOVERNED_MEMORY_TOKEN_PATH,
    KAGENT_TOKEN_PATH,
    MAX_ANSWER_BYTES,
    TokenSource,
    default_token_file,
)

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_TIMEOUT",
    "GOVERNED_MEMORY_TOKEN_FILE_ENV",
    "GOVERNED_MEMORY_TOKEN_PATH",
    "KAGENT_TOKEN_PATH",
    "MAX_ANSWER_BYTES",
    "KagentBridgeStore",
    "KagentControllerStore",
    "TokenSource",
    "default_token_file",
]
