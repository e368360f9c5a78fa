"""``kagent-governed-memory keys``: the bridge's Ed25519 signing key and the public keys that
runtimes and the controller verify with (see ``KEYS_HELP``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import GovernanceError
from ..scope._keys import (
    generate_private_key,
    key_id,
    load_private_key,
    load_public_keys,
    private_key_pem,
    public_jwks,
    public_key_pem,
)
from ._text import EXIT_CODES_POINTER

__all__ = ["add_key_commands"]

EXIT_OK, EXIT_USAGE = 0, 2

KEYS_HELP = """\
Prints public material only; the private key goes to a file created with mode 0600 (never
to stdout).

  keys generate --out bridge.pem           # bridge only; prints the kid and the public PEM
  keys public-key --private bridge.pem     # the public half, PEM (or --jwks)
  keys jwks old-public.pem new-public.pem  # one JWK Set of several public keys (rotation)

The same with openssl: openssl genpkey -algorithm ed25519 -out bridge.pem, and
openssl pkey -in bridge.pem -pubout."""


def add_key_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    def command(parent: argparse._SubParsersAction, name: str, summary: str,  # type: ignore[type-arg]
                details: str = "") -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(
            name, help=summary, epilog=EXIT_CODES_POINTER,
            description=f"{summary}.\n\n{details}".rstrip(),
            formatter_class=argparse.RawDescriptionHelpFormatter)
        return parser

    keys = command(sub, "keys", "the bridge's signing key and the verifiers' public keys",
                   KEYS_HELP)
    cmds = keys.add_subparsers(dest="keys_command", required=True)
    gen = command(cmds, "generate", "a new Ed25519 private key for the bridge (0600 file)",
                  "Writes the private PEM to --out (never stdout) and prints the public PEM.")
    gen.add_argument("--out", required=True, type=Path, help="where to write the private PEM")
    gen.set_defaults(handler=_generate)
    pub = command(cmds, "public-key", "the public key of a private key file")
    pub.add_argument("--private", required=True, type=Path, help="the private key (PEM or JWK)")
    pub.add_argument("--jwks", action="store_true", help="print a JWK Set instead of PEM")
    pub.set_defaults(handler=_public_key)
    jwks = command(cmds, "jwks", "one JWK Set of the public keys in the given files",
                   "Several files for a rotation: old and new keys side by side.")
    jwks.add_argument("files", nargs="+", type=Path, help="PEM, JWK or JWK Set files")
    jwks.set_defaults(handler=_jwks)


async def _generate(args: argparse.Namespace) -> int:
    key = generate_private_key()
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print("error: --out exists; refusing to overwrite a key", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"error: cannot create --out ({type(exc).__name__})", file=sys.stderr)
        return EXIT_USAGE
    with os.fdopen(fd, "wb") as f:
        f.write(private_key_pem(key))
    print(f"# kid {key_id(key)}; private key written to {args.out} (mode 0600)", file=sys.stderr)
    sys.stdout.write(public_key_pem(key).decode("ascii"))
    return EXIT_OK


async def _public_key(args: argparse.Namespace) -> int:
    try:
        key = load_private_key(args.private)
    except GovernanceError:
        print("error: --private is not a readable Ed25519 private key (PEM or JWK)",
              file=sys.stderr)
        return EXIT_USAGE
    if args.jwks:
        print(json.dumps(public_jwks(key), indent=1))
    else:
        sys.stdout.write(public_key_pem(key).decode("ascii"))
    return EXIT_OK


async def _jwks(args: argparse.Namespace) -> int:
    merged = {}
    for path in args.files:
        try:
            found = load_public_keys(path)
        except GovernanceError:
            print(f"error: {path} holds no usable Ed25519 public key (private keys are refused)",
                  file=sys.stderr)
            return EXIT_USAGE
        for kid, key in found.items():
            if kid in merged:
                print("error: two keys share one kid", file=sys.stderr)
                return EXIT_USAGE
            merged[kid] = key
    print(json.dumps(public_jwks(merged), indent=1))
    return EXIT_OK
