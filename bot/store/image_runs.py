"""Image runs (``/images import`` and ``fetch``): their records and the set of those not
ended yet, which the workers go through (:mod:`bot.engine.image_runner`)."""

from __future__ import annotations

import logging

from pydantic import ValidationError

from bot.lifecycle.image_run import ImageRun
from bot.store import keys
from bot.store.base import Section, rides

log = logging.getLogger(__name__)


class ImageRuns(Section):
    """Image runs' records."""

    @rides
    async def save(self, run: ImageRun) -> None:
        """Write the record; an active one is in the active set, an ended one leaves it
        and expires after ``IMAGE_RUN_KEEP_S``."""
        body = self.core.redact(run.model_dump_json())
        async with self.redis.pipeline(transaction=True) as pipe:
            if run.active:
                pipe.set(keys.image_run(run.id), body)
                pipe.sadd(keys.IMAGE_RUNS_ACTIVE, run.id)
            else:
                pipe.set(keys.image_run(run.id), body, ex=keys.IMAGE_RUN_KEEP_S)
                pipe.srem(keys.IMAGE_RUNS_ACTIVE, run.id)
            await pipe.execute()

    @rides
    async def get(self, run_id: str) -> ImageRun | None:
        """The record, checked by its model (None: none, or one no model accepts: logged)."""
        raw = await self.redis.get(keys.image_run(run_id))
        if raw is None:
            return None
        try:
            return ImageRun.model_validate_json(raw)
        except ValidationError as exc:
            log.warning("image run %s: its record is refused: %s", run_id, exc)
            return None

    @rides
    async def active(self) -> list[str]:
        return sorted(str(r) for r in await self.redis.smembers(keys.IMAGE_RUNS_ACTIVE))

    @rides
    async def drop(self, run_id: str) -> None:
        """Out of the active set (its record could not be read)."""
        await self.redis.srem(keys.IMAGE_RUNS_ACTIVE, run_id)
