"""Shared pieces of the console script: help texts, exit codes, errors (plain or ``--json``),
output, and the text forms of times (ISO 8601 with zone) and durations (``7 days``)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["DESCRIPTION", "EXIT_CODES_HELP", "EXIT_CODES_POINTER", "EXIT_CONFIGURATION",
           "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNAVAILABLE", "EXIT_USAGE",
           "CliError", "emit", "fail", "human_duration", "human_value", "timestamp"]

# Stable: scripts and CronJobs branch on these.
EXIT_OK = 0  # done; verify/offboard: every invariant holds, every erasure verified
EXIT_FAILED = 1  # a check failed: an invariant violated, an erasure not verified
EXIT_USAGE = 2  # bad arguments (fix the command line)
EXIT_UNAVAILABLE = 3  # database unreachable, schema missing or outdated (retry, or migrate)
EXIT_CONFIGURATION = 4  # the database refused this login or this role may not do it
EXIT_INTERRUPTED = 130  # Ctrl-C

# Help texts are plain text (argparse prints them as they are): no reST markup.
DESCRIPTION = """\
kagent-governed-memory: operator commands, a development database and the demo.
Output is content-free except the demo subject's own inspect page.
Each command's own help: kagent-governed-memory COMMAND --help."""

# The one exit-code table: the top-level --help; every command's help points here.
EXIT_CODES_HELP = """\
exit codes (every command):
  0  done (verify/offboard: every invariant holds, every erasure verified)
  1  a check failed: an invariant violated or an erasure not verified
  2  usage: bad or missing arguments, an unparsable DSN; keys: a missing or unreadable
     key file, an existing --out, two keys with one kid
  3  unavailable: database unreachable, schema missing or outdated, no embedded PostgreSQL
  4  configuration: the database refused the login (password, unknown role or database) or
     the role is wrong for the command (an application login cannot migrate; offboard,
     unblock, policy and login need an operator login; an owner or superuser login cannot
     serve) or --local-server differs from the database's
130  interrupted
With --json, success is one JSON object on stdout with "ok": true; an error is one JSON
object on stdout: {"ok": false, "error": <reason code>, "message": ..., "exit_code": ...}."""
EXIT_CODES_POINTER = "exit codes: see kagent-governed-memory --help"


class CliError(Exception):
    """A content-free failure with its exit code and reason code."""

    def __init__(self, code: int, error: str, message: str) -> None:
        super().__init__(message)
        self.code, self.error, self.message = code, error, message


def fail(args: argparse.Namespace | None, code: int, error: str, message: str) -> int:
    """Report an error: one JSON object on stdout under ``--json`` (``args`` None: the command
    line could not be parsed, and it asked for JSON), else a line on stderr."""
    if args is None or getattr(args, "json", False):
        if not message:
            message = "the command line was not understood: see --help"
        print(json.dumps({"ok": False, "error": error, "message": message, "exit_code": code},
                         sort_keys=True))
    else:
        print(f"error: {message}", file=sys.stderr)
    return code


def emit(args: argparse.Namespace, payload: dict[str, Any], human: str) -> None:
    """A command's result: ``human`` text, or (``--json``) ``payload`` as one JSON object with
    ``"ok": true`` unless the payload says otherwise (verify, offboard)."""
    body = {"ok": True} | payload
    print(json.dumps(body, default=str, sort_keys=True) if args.json else human)


def timestamp(value: datetime) -> str:
    """ISO 8601 with date and zone, in UTC: ``2025-12-01T05:26:00+00:00``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="seconds")


def human_duration(value: timedelta) -> str:
    """``7 days``, ``1 day 2 hours``, ``90 seconds`` → ``1 minute 30 seconds``."""
    total = int(value.total_seconds())
    if total <= 0:
        return "0 seconds"
    parts = []
    for name, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        n, total = divmod(total, size)
        if n:
            parts.append(f"{n} {name}{'' if n == 1 else 's'}")
    return " ".join(parts)


def human_value(value: object) -> str:
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, timedelta):
        return human_duration(value)
    if value is None:
        return "-"
    return str(getattr(value, "value", value))
