"""The API described as OpenAPI 3.1 (``GET /api/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any

from bot import __version__

_ANSWER = {
    "type": "object",
    "required": ["ok", "text"],
    "properties": {
        "ok": {"type": "boolean"},
        "text": {
            "type": "string",
            "description": "What Slack would show for the same slash command (Slack mrkdwn).",
        },
        "error": {
            "type": "string",
            "description": "Set when ok is false: refused (the core said no, text says "
            "why), missing_token, invalid_token, insufficient_scope, unavailable, internal.",
        },
    },
}
_LAUNCH = {
    "type": "object",
    "properties": {
        name: {"type": kind}
        for name, kind in {
            "id": "string",
            "user_id": "string",
            "request": "string",
            "title": "string",
            "cluster": "string",
            "nodes": "integer",
            "phase": "string",
            "state": "string",
            "active": "boolean",
            "outcome": "string",
            "detail": "string",
            "ending": "object",
            "job_id": "string",
            "attempts": "integer",
            "step": "integer",
            "total_steps": "integer",
            "loss": "number",
            "checkpoints": "integer",
            "sweep": "string",
            "created_at": "number",
            "updated_at": "number",
            "thread": "string",
            "record": "object",
        }.items()
    },
}
_JOB = {
    "name": "job",
    "in": "path",
    "required": True,
    "description": "A launch id (L-7f3a9c), a sweep id (S-41c2aa, cancel only) or a Slurm job id.",
    "schema": {"type": "string"},
}
_CLUSTER = {
    "name": "cluster",
    "in": "query",
    "description": "The cluster of a Slurm job id that more than one cluster has.",
    "schema": {"type": "string"},
}
_ARGS = {
    "name": "args",
    "in": "query",
    "description": "What would follow the slash command in Slack.",
    "schema": {"type": "string"},
}


def _op(summary: str, scope: str, params: list[dict[str, Any]], extra: dict[str, Any]) -> Any:
    schema = {"allOf": [_ANSWER, {"type": "object", "properties": extra}]}
    return {
        "summary": summary,
        "security": [{"bearer": [scope]}],
        "parameters": params,
        "responses": {
            "200": {"description": "Answered", "content": {"application/json": {"schema": schema}}},
            "400": {"description": "Refused: text says why, as Slack would"},
            "401": {"description": "No token, or one unknown, revoked or expired"},
            "403": {"description": "The token lacks the scope"},
        },
    }


def spec() -> dict[str, Any]:
    launches = {"launches": {"type": "array", "items": _LAUNCH}}
    train = _op(
        "/train: start a launch (or a sweep); its thread goes to your DM or the channel named",
        "launch",
        [],
        {"launch_id": {"type": "string"}, "channel": {"type": "string"}, **launches},
    )
    train["requestBody"] = {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["text"],
                    "properties": {
                        "text": {
                            "type": "string",
                            "example": "sft llama3p1_8b nodes=2 cluster=a4",
                            "description": "What follows /train.",
                        },
                        "channel": {
                            "type": "string",
                            "description": "A channel id for the thread (default: your DM).",
                        },
                    },
                }
            }
        },
    }
    follow = {
        "name": "follow",
        "in": "query",
        "description": "true: the log as it grows (chunked text/plain) until the launch ends; "
        "the last line starts [trainbot] and gives its final state.",
        "schema": {"type": "boolean"},
    }
    lines = {"name": "lines", "in": "query", "schema": {"type": "integer"}}
    item = {"type": "array", "items": {"type": "object"}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "trainbot", "version": __version__},
        "servers": [{"url": "/api/v1"}],
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A personal token from the App Home (scopes read, launch).",
                }
            }
        },
        "paths": {
            "/launches": {
                "post": train,
                "get": _op("/jobs: your active launches", "read", [_ARGS], launches),
            },
            "/launches/{job}": {
                "get": _op("One launch", "read", [_JOB, _CLUSTER], {"launch": _LAUNCH})
            },
            "/launches/{job}/logs": {
                "get": _op(
                    "/logs: the tail, or follow it",
                    "read",
                    [_JOB, _CLUSTER, lines, follow],
                    {"log": {"type": "string"}},
                )
            },
            "/launches/{job}/cancel": {
                "post": _op("/cancel and its confirm", "launch", [_JOB, _CLUSTER], {})
            },
            "/launches/{job}/checkpoints": {
                "get": _op(
                    "A launch's checkpoints", "read", [_JOB, _CLUSTER], {"checkpoints": item}
                )
            },
            "/launches/{job}/watch": {
                "post": _op("/watch: its start, checkpoints and end by DM", "read", [_JOB], {}),
                "delete": _op("/unwatch", "read", [_JOB], {}),
            },
            "/usage": {
                "get": _op("/usage: GPU-hours used", "read", [_ARGS], {"csv": {"type": "string"}})
            },
            "/clusters": {"get": _op("/clusters: capacity", "read", [_ARGS], {})},
        },
    }
