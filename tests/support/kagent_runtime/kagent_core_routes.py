"""A stand-in for kagent's own session and task routes, storing in PostgreSQL (runs in the kagent venv).

kagent-adk's ``KAgentSessionService`` and kagent-core's ``KAgentTaskStore`` persist every ADK
session event and every A2A task through the controller (``/api/sessions``,
``/api/sessions/{id}/events``, ``/api/tasks``), which keeps them in its database: whatever a
tool response carries is kept there, beyond any forget or withdrawal.  This stand-in serves
those routes the way kagent v0.9.11's Go handlers answer them (the ``{"error", "data",
"message"}`` envelope) and stores into the ``session``, ``event`` and ``task`` tables of
kagent's core migration ``000001_initial.up.sql`` (the columns copied from v0.9.11), in a schema
of its own, so a test can read back everything kagent would have persisted.

Left out: the Go handlers themselves (their routes are served here, not by the compiled
controller), feedback, push notifications and the LangGraph checkpoint tables.
"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
from psycopg import sql
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

# kagent v0.9.11 go/core/pkg/migrations/core/000001_initial.up.sql (these three tables).
CORE_TABLES = """
CREATE TABLE IF NOT EXISTS session (
    id         TEXT        NOT NULL,
    user_id    TEXT        NOT NULL,
    name       TEXT,
    created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    deleted_at TIMESTAMPTZ,
    agent_id   TEXT,
    source     TEXT,
    PRIMARY KEY (id, user_id)
);
CREATE TABLE IF NOT EXISTS event (
    id         TEXT        NOT NULL,
    user_id    TEXT        NOT NULL,
    session_id TEXT,
    created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    deleted_at TIMESTAMPTZ,
    data       TEXT        NOT NULL,
    PRIMARY KEY (id, user_id)
);
CREATE TABLE IF NOT EXISTS task (
    id         TEXT        PRIMARY KEY,
    created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ,
    deleted_at TIMESTAMPTZ,
    data       TEXT        NOT NULL,
    session_id TEXT
);
"""


def _ok(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse({"error": False, "data": data, "message": "ok"}, status_code=status)


def _not_found() -> JSONResponse:
    return JSONResponse({"error": True, "data": None, "message": "not found"}, status_code=404)


class KagentCoreRoutes:
    """kagent's session and task routes on ``dsn``, in schema ``schema``."""

    def __init__(self, dsn: str, schema: str) -> None:
        assert re.fullmatch(r"[a-z_][a-z0-9_]{0,40}", schema), schema
        self.dsn, self.schema = dsn, schema
        self.calls: dict[str, int] = {}
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            conn.execute(CORE_TABLES)
        self.app = Starlette(routes=[
            Route("/api/sessions", self.sessions, methods=["GET", "POST"]),
            Route("/api/sessions/{session_id}", self.session, methods=["GET", "DELETE"]),
            Route("/api/sessions/{session_id}/events", self.events, methods=["POST"]),
            Route("/api/tasks", self.tasks, methods=["POST"]),
            Route("/api/tasks/{task_id}", self.task, methods=["GET", "DELETE"]),
        ])

    async def _db(self) -> psycopg.AsyncConnection:
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        return conn

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    async def sessions(self, request: Request) -> JSONResponse:
        user = request.query_params.get("user_id", "admin@kagent.dev")
        async with await self._db() as conn:
            if request.method == "GET":
                self._count("list_sessions")
                rows = await (await conn.execute(
                    "SELECT id, user_id, name, agent_id FROM session WHERE user_id = %s"
                    " AND deleted_at IS NULL ORDER BY created_at", [user])).fetchall()
                return _ok([{"id": r[0], "user_id": r[1], "name": r[2], "agent_id": r[3]}
                            for r in rows])
            self._count("create_session")
            body = await request.json()
            await conn.execute(
                "INSERT INTO session (id, user_id, name, agent_id, source, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s, now(), now())",
                [body["id"], user, body.get("name"), body.get("agent_ref"), body.get("source")])
            return _ok({"id": body["id"], "user_id": user, "name": body.get("name"),
                        "agent_id": body.get("agent_ref")}, status=201)

    async def session(self, request: Request) -> JSONResponse:
        sid = request.path_params["session_id"]
        user = request.query_params.get("user_id", "admin@kagent.dev")
        async with await self._db() as conn:
            row = await (await conn.execute(
                "SELECT id, user_id, name, agent_id FROM session WHERE id = %s AND user_id = %s"
                " AND deleted_at IS NULL", [sid, user])).fetchone()
            if row is None:
                return _not_found()
            if request.method == "DELETE":
                self._count("delete_session")
                await conn.execute("UPDATE session SET deleted_at = now() WHERE id = %s"
                                   " AND user_id = %s", [sid, user])
                return _ok(None)
            self._count("get_session")
            order = "DESC" if request.query_params.get("order") == "desc" else "ASC"
            limit = int(request.query_params.get("limit", "-1"))
            events = await (await conn.execute(
                sql.SQL("SELECT id, data, created_at FROM event WHERE session_id = %s AND user_id = %s"
                        " AND deleted_at IS NULL ORDER BY created_at {}, ctid {}").format(
                    sql.SQL(order), sql.SQL(order)), [sid, user])).fetchall()
            if limit > 0:
                events = events[-limit:] if order == "ASC" else events[:limit]
            return _ok({"session": {"id": row[0], "user_id": row[1], "name": row[2],
                                    "agent_id": row[3]},
                        "events": [{"id": e[0], "data": e[1], "session_id": sid, "user_id": user}
                                   for e in events]})

    async def events(self, request: Request) -> JSONResponse:
        self._count("append_event")
        sid = request.path_params["session_id"]
        user = request.query_params.get("user_id", "admin@kagent.dev")
        body = await request.json()
        async with await self._db() as conn:
            await conn.execute(
                "INSERT INTO event (id, user_id, session_id, data, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, clock_timestamp(), clock_timestamp())",
                [body["id"], user, sid, body["data"]])
        return _ok({"id": body["id"], "session_id": sid, "user_id": user}, status=201)

    async def tasks(self, request: Request) -> JSONResponse:
        self._count("save_task")
        task = await request.json()
        async with await self._db() as conn:
            await conn.execute(
                "INSERT INTO task (id, data, session_id, created_at, updated_at)"
                " VALUES (%s, %s, %s, now(), now())"
                " ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, updated_at = now()",
                [task["id"], json.dumps(task), task.get("context_id") or task.get("contextId")])
        return _ok(task, status=201)

    async def task(self, request: Request) -> JSONResponse:
        tid = request.path_params["task_id"]
        async with await self._db() as conn:
            if request.method == "DELETE":
                self._count("delete_task")
                await conn.execute("UPDATE task SET deleted_at = now() WHERE id = %s", [tid])
                return _ok(None)
            self._count("get_task")
            row = await (await conn.execute(
                "SELECT data FROM task WHERE id = %s AND deleted_at IS NULL", [tid])).fetchone()
        return _not_found() if row is None else _ok(json.loads(row[0]))

    def tables_containing(self, needles: list[str]) -> dict[str, int]:
        """For every table of the schema: how many rows carry any of ``needles`` anywhere
        (each row as text: every column)."""
        found: dict[str, int] = {}
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                [self.schema]).fetchall()]
            for table in tables:
                rows = conn.execute(sql.SQL("SELECT t::text FROM {}.{} t").format(
                    sql.Identifier(self.schema), sql.Identifier(table))).fetchall()
                found[table] = sum(1 for (text,) in rows if any(n in text for n in needles))
        return found

    def row_counts(self) -> dict[str, int]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return {t: conn.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
                sql.Identifier(self.schema), sql.Identifier(t))).fetchone()[0]
                for t in ("session", "event", "task")}
