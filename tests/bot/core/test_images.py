"""/images through the core, answered over the dev cluster's SSH; an import or fetch of
an image the person could not then run is refused before anything is queued."""

from __future__ import annotations

import pytest

from bot.core.core import Core
from bot.gateway.on_cluster import Clusters
from bot.settings.env import Settings
from bot.text.front import Incoming
from cluster.ssh.pool import SSHPool
from tests.bot.botkit import dev_config, open_test_store

pytestmark = [pytest.mark.devcluster, pytest.mark.usefixtures("clean_redis")]


async def test_images_lists_the_clusters_images_and_refuses_an_image_it_could_not_run() -> None:
    config = dev_config()
    async with open_test_store() as store, SSHPool() as pool:
        core = Core(
            store, Clusters(config, Settings.from_environ({}), pool), config.command_context()
        )

        async def ask(text: str) -> tuple[bool, str]:
            reply = await core(
                Incoming(user_id="U0ALICE", channel_id="C1", command="/images", text=text)
            )
            return reply.error, reply.text

        error, text = await ask("cluster=a4")
        assert not error, text
        assert text.startswith("*a4*\n")
        assert "`~/vertex-oss-training/nemo/nemo-20250721.sqsh` · " in text
        assert "default for nemo" in text and "default for nemo-rl" in text
        assert "`nvcr.io/nvidia/nemo:26.02` (megatron-bridge): a registry image" in text
        error, text = await ask("import docker://nvcr.io#nvidia/nemo:26.02 as nemo26")
        assert error, text  # the dev cluster's policy allows no custom images
        assert text.startswith(
            "The image would be ~/vertex-oss-training/images/nemo26.sqsh, which you could not "
            "then use: Custom images are not allowed for you on a3m (policy.custom_images)."
        ), text
        assert await store.image_runs.active() == []
        error, text = await ask("cluster=a5")
        assert error and "Unknown cluster 'a5'" in text, text
