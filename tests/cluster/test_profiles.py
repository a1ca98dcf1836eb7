"""Cluster profiles: type defaults, login-node paths, Slurm time limits."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from cluster.site.login import Identity
from cluster.site.profile_fields import TokenizerSeed, check_remote_path
from cluster.site.profiles import ClusterProfile
from cluster.slurm.base import slurm_time_seconds


def profile(**fields: Any) -> ClusterProfile:
    base: dict[str, Any] = {
        "name": "a4",
        "type": "hcc-a4",
        "login": {"host": "127.0.0.1", "port": 2222, "user": "trainer"},
        "partition": "a4",
        "max_nodes": 4,
    }
    return ClusterProfile.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("cluster_type", "machine"),
    [
        ("hcc-a3m", "A3 Mega (H100, TCPXO)"),
        ("hcc-a3u", "A3 Ultra (H200, RDMA)"),
        ("hcc-a4", "A4 (B200, RDMA)"),
        ("hcc-a3h", "A3 High (H100)"),
    ],
)
def test_type_defaults(cluster_type: str, machine: str) -> None:
    built = profile(type=cluster_type)
    assert built.gpus_per_node == 8
    assert built.machine == machine


def test_paths_default_from_recipes_dir() -> None:
    built = profile(recipes_dir="/opt/vot")
    assert built.nemorun_home == "/opt/vot/nemo"
    assert built.log_dir == "/opt/vot/nemo/logs"
    assert built.images == {
        "nemo": "/opt/vot/nemo/nemo-20250721.sqsh",
        "nemo-rl": "/opt/vot/nemo_rl/nemo_rl-h20260302.sqsh",  # the newest NeMo-RL image
        "megatron-bridge": "nvcr.io/nvidia/nemo:26.02",  # a registry image: pyxis imports it
    }
    assert (built.cache_dir, built.data_dir) == ("~/.cache", "~/data")


def test_overrides_and_nulls() -> None:
    built = profile(
        gpus_per_node=4,
        nemorun_home=None,
        images={"nemo": "/x/n.sqsh", "nemo-25": "/x/n25.sqsh"},
        account=None,
    )
    assert built.gpus_per_node == 4
    assert built.nemorun_home == "~/vertex-oss-training/nemo"
    assert built.images["nemo-rl"].endswith("nemo_rl-h20260302.sqsh")
    assert built.resolve_image("nemo-25", "nemo") == "/x/n25.sqsh"
    assert built.resolve_image(None, "nemo-rl") == built.images["nemo-rl"]
    assert built.resolve_image("/y/z.sqsh", "nemo") == "/y/z.sqsh"


def test_attach_url() -> None:
    built = profile(attach_url_template="https://console.example/ssh?host={host}&job={job_id}")
    assert built.attach_url(job_id="42") == "https://console.example/ssh?host=127.0.0.1&job=42"
    assert profile().attach_url(job_id="42") is None


def test_tensorboard_url_quotes_what_it_fills_in() -> None:
    built = profile(
        tensorboard_url_template="https://tb.example/{launch_id}?dir={log_dir}&j={job_id}"
    )
    url = built.tensorboard_url(log_dir="/logs/a b&c=d", job_id="7", launch_id="L-1")
    assert url == "https://tb.example/L-1?dir=/logs/a%20b%26c%3Dd&j=7"
    assert profile().tensorboard_url(log_dir="/x", job_id="7", launch_id="L-1") is None


def test_job_secrets_reference_env_or_file() -> None:
    built = profile(job_secrets={"HF_TOKEN": {"env": "TRAINBOT_HF_TOKEN"}, "W": {"file": "~/w"}})
    assert built.job_secrets["HF_TOKEN"].env == "TRAINBOT_HF_TOKEN"
    assert built.job_secrets["W"].file == "~/w"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"type": "hcc-a5"}, "Input should be 'hcc-a3m', 'hcc-a3u', 'hcc-a4' or 'hcc-a3h'"),
        ({"max_nodes": 0}, "greater than or equal to 1"),
        ({"recipes_dir": "vertex"}, "must be absolute or start with '~/'"),
        ({"recipes_dir": "~/a b"}, "may contain only letters"),
        ({"log_dir": "~/../etc"}, "must not contain '..'"),
        ({"partition": "a4;ls"}, "String should match"),
        ({"time_limit": "0"}, "zero means no limit"),
        ({"attach_url_template": "https://x/{token}"}, "unknown placeholder {token}"),
        ({"tensorboard_url_template": "https://x/{token}"}, "unknown placeholder {token}"),
        ({"tensorboard_url_template": "https://x/{log_dir!r}"}, "unknown placeholder {log_dir!r}"),
        ({"tensorboard_url_template": "https://x/{log_dir"}, "not a template"),
        ({"tensorboard_url_template": "http://tb.example/{log_dir}"}, "must start with https://"),
        ({"tensorboard_url_template": "https://{job_id}.tb/"}, "must start with https://"),
        ({"tensorboard_url_template": "javascript:alert(1)"}, "must start with https://"),
        ({"tensorboard_url_template": "https://tb/?a|b"}, "must not contain"),
        ({"job_secrets": {"X": {"env": "A", "file": "~/a"}}}, "give exactly one of env"),
        ({"job_secrets": {"X": {}}}, "give exactly one of env"),
        ({"login": {"host": "h;x", "user": "u"}}, "String should match"),
        ({"surprise": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_profiles(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        profile(**fields)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 5400),
        ("90:30", 5430),
        ("04:00:00", 14400),
        ("1-0", 86400),
        ("2-12", 216000),
        ("1-02:30", 95400),
        ("1-02:30:15", 95415),
    ],
)
def test_slurm_time_seconds(text: str, seconds: int) -> None:
    assert slurm_time_seconds(text) == seconds


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("0", "zero means no limit"),
        ("00:00:00", "zero means no limit"),
        ("1:60:00", "minutes must be 0 to 59"),
        ("10:61", "seconds must be 0 to 59"),
        ("1-24", "hours after 'D-' must be 0 to 23"),
        ("400-00", "more than 365 days"),
        ("UNLIMITED", "not a Slurm time"),
        ("1h", "not a Slurm time"),
        ("", "not a Slurm time"),
    ],
)
def test_bad_slurm_times(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        slurm_time_seconds(text)


@pytest.mark.parametrize("path", ["/a/b", "~/x", "~", "~/vertex-oss-training/nemo_rl"])
def test_good_remote_paths(path: str) -> None:
    assert check_remote_path(path) == path


def test_tokenizer_seed_is_optional_paths_or_urls() -> None:
    assert profile().tokenizer_seed is None
    built = profile(
        tokenizer_seed={"vocab": "~/tok/gpt2-vocab.json/", "merges": "https://example.com/m.txt"}
    )
    assert built.tokenizer_seed == TokenizerSeed(
        vocab="~/tok/gpt2-vocab.json", merges="https://example.com/m.txt"
    )


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        ({"vocab": "tok/v.json", "merges": "/m"}, "tokenizer_seed.vocab"),
        ({"vocab": "/v", "merges": "/a/../m"}, "must not contain '..'"),
        ({"vocab": "/v", "merges": "ftp://x/m"}, "must be absolute or start with '~/'"),
        ({"vocab": "https://", "merges": "/m"}, "http\\(s\\) URL with a host"),
        ({"vocab": "/v"}, "tokenizer_seed.merges"),
        ({"vocab": "/v", "merges": "/m", "tokens": "/t"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_tokenizer_seeds(seed: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        profile(tokenizer_seed=seed)


def test_identity_maps_listed_people_then_email_local_parts() -> None:
    identity = Identity(
        users={"U0A": "alice", "carol": "carol"}, from_email=True, email_domains=("example.com",)
    )
    assert identity.username_for("U0A") == "alice"
    assert identity.username_for("U0A", "someone.else@example.com") == "alice"  # listed wins
    assert identity.username_for("carol") == "carol"  # a console name
    assert identity.username_for("U0B", "Bob@Example.com") == "bob"  # a configured domain
    assert identity.username_for("U0B") is None  # no email, no mapping
    assert identity.username_for("U0B", "not an email") is None
    assert identity.username_for("U0B", "r;m -rf@example.com") is None  # not a username
    assert identity.unmapped == "refuse"  # the default
    assert Identity(users={"U0A": "alice"}).username_for("U0B", "bob@example.com") is None


@pytest.mark.parametrize(
    ("email", "why"),
    [
        ("bob@evil.example", "is in evil.example, not in example.com"),
        ("bob@example.com.evil.example", "not in example.com"),
        ("bob@sub.example.com", "not in example.com"),
        ("alice@example.com", "names alice, who is someone else here"),
        ("carol@example.com", "names carol, who is someone else here"),
        ("root@example.com", "names root, which is not a person's user"),
        ("ROOT@example.com", "names root, which is not a person's user"),
        ("trainer@example.com", "names trainer, which is not a person's user"),
        ("@example.com", "is not an email address"),
    ],
)
def test_an_email_never_borrows_a_name(email: str, why: str) -> None:
    identity = Identity(
        users={"U0A": "alice", "carol": "carol"}, from_email=True, email_domains=("example.com",)
    )
    name, reason = identity.resolve("U0EVIL", email, shared="trainer")
    assert name is None and why in reason, reason
    assert identity.username_for("U0EVIL", email, shared="trainer") is None


def test_from_email_without_domains_is_refused() -> None:
    with pytest.raises(ValidationError, match="from_email: true needs email_domains"):
        Identity(from_email=True)
    with pytest.raises(ValidationError, match="email_domains"):
        Identity(from_email=True, email_domains=("not a domain",))


def test_a_person_sees_the_cluster_as_their_own_user() -> None:
    shared = profile(
        login={
            "host": "127.0.0.1",
            "user": "trainer",
            "key_file": "/k",
            "user_ca_key_file": "/ca",
        },
        identity={"users": {"U0A": "alice"}},
    )
    alice = shared.as_user("alice")
    assert (alice.login.user, alice.login.key_file) == ("alice", None)  # a certificate, no key
    assert alice.login.user_ca_key_file == shared.login.user_ca_key_file
    assert alice.recipes_dir == "~/vertex-oss-training"  # ~ is now alice's home
    assert shared.as_user("") is shared and shared.as_user("trainer") is shared
