"""A local stand-in for W&B's public GraphQL API (``POST /graphql``), on 127.0.0.1.

It answers the one query trainbot sends (a run's ``summaryMetrics`` by entity, project
and run name) the way W&B's API answers it: ``{"data": {"project": {"run": ...}}}``,
``run: null`` for a run it does not know, HTTP 401 for a wrong key (HTTP basic auth,
user ``api``, as the ``wandb`` SDK sends it). It records each request's variables and
whether the key was the right one, never the key itself. Point trainbot at it with
``TRAINBOT_WANDB_API_URL=standin.base_url``.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class WandbStandin:
    key: str
    # (entity, project, run id) -> the run's summary, as W&B keeps it
    runs: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    seen: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/graphql", self._graphql)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _graphql(self, request: web.Request) -> web.Response:
        expected = "Basic " + base64.b64encode(f"api:{self.key}".encode()).decode()
        good = request.headers.get("Authorization", "") == expected
        body = await request.json()
        variables = body.get("variables") or {}
        self.seen.append({"variables": variables, "key_ok": good, "query": body.get("query")})
        if not good:
            return web.json_response({"errors": [{"message": "unauthorized"}]}, status=401)
        where = (variables.get("entity"), variables.get("project"), variables.get("name"))
        summary = self.runs.get(where)  # type: ignore[arg-type]
        run = (
            None
            if summary is None
            else {"state": "finished", "summaryMetrics": json.dumps(summary)}
        )
        return web.json_response({"data": {"project": {"run": run}}})
