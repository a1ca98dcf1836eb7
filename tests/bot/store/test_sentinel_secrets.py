"""Sentinel with secrets, against a real data node and a real sentinel the test starts
(``redis-server --sentinel``) on free ports: the sentinel requires a password of its own
(``requirepass``) and is reached with ``REDIS_SENTINEL_PASSWORD``; without it the store
refuses to start, naming the sentinels. Then both hops over TLS: the sentinel and the
data node speak only TLS, with certificates of a CA the test makes, and the store reaches
them with ``REDIS_SENTINEL_TLS``, ``REDIS_TLS`` and ``REDIS_TLS_CA_CERT``. Also an ACL
user of the sentinel (``REDIS_SENTINEL_USERNAME``), and a plain ``rediss://`` URL."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import SecretStr

from bench.soak_infra import free_port
from bot.settings.env import Settings, Target
from bot.store.base import StoreError
from bot.store.store import Store

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
    reason="needs redis-server and redis-cli",
)

DATA_PASSWORD = "data-node-pass-1"
SENTINEL_PASSWORD = "sentinel-pass-2"
SERVICE = "tmaster"


def make_ca_and_cert(where: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signs for 127.0.0.1 and localhost."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainbot test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = where / "ca.pem", where / "server.pem", where / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths[2].chmod(0o600)
    return paths


def wait_ping(port: int, *args: str) -> None:
    for _ in range(100):
        out = subprocess.run(
            ["redis-cli", "-p", str(port), *args, "ping"],
            capture_output=True, text=True, timeout=5, check=False,
        )  # fmt: skip
        if "PONG" in out.stdout:
            return
        subprocess.run(["sleep", "0.1"], check=False)
    raise AssertionError(f"redis on {port} never answered: {out.stdout} {out.stderr}")


class Servers:
    """A data node and one sentinel watching it, stopped at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], port: int, ping: list[str]) -> None:
        self.procs.append(
            subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        wait_ping(port, *ping)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(10)

    def pair(
        self, *, tls: tuple[Path, Path, Path] | None = None, acl_user: str = ""
    ) -> tuple[int, int]:
        """A data node (password DATA_PASSWORD) and a sentinel (password SENTINEL_PASSWORD)
        monitoring it as SERVICE; with ``tls`` (ca, cert, key) both speak only TLS; with
        ``acl_user`` the sentinel also has that ACL user (same password)."""
        data_port, sentinel_port = free_port(), free_port()
        tls_args: list[str] = []
        cli_tls: list[str] = []
        if tls is not None:
            ca, cert, key = (str(p) for p in tls)
            tls_args = [
                "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca,
                "--tls-auth-clients", "no",
            ]  # fmt: skip
            cli_tls = ["--tls", "--cacert", ca]
        port_args = (
            ["--port", "0", "--tls-port", str(data_port)] if tls else ["--port", str(data_port)]
        )
        self.start(
            [
                "redis-server", *port_args, "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--requirepass", DATA_PASSWORD, *tls_args,
            ],
            data_port,
            [*cli_tls, "-a", DATA_PASSWORD, "--no-auth-warning"],
        )  # fmt: skip
        conf = self.workdir / f"sentinel-{sentinel_port}.conf"
        lines = [
            f"port {0 if tls else sentinel_port}",
            "bind 127.0.0.1",
            f"dir {self.workdir}",
            f"requirepass {SENTINEL_PASSWORD}",
            *([f"user {acl_user} on >{SENTINEL_PASSWORD} allchannels +@all"] if acl_user else []),
            f"sentinel monitor {SERVICE} 127.0.0.1 {data_port} 1",
            f"sentinel auth-pass {SERVICE} {DATA_PASSWORD}",
        ]
        if tls is not None:
            ca, cert, key = (str(p) for p in tls)
            lines += [
                f"tls-port {sentinel_port}",
                f"tls-cert-file {cert}",
                f"tls-key-file {key}",
                f"tls-ca-cert-file {ca}",
                "tls-auth-clients no",
                "tls-replication yes",  # the sentinel reaches the data node over TLS too
            ]
        conf.write_text("\n".join(lines) + "\n")
        self.start(
            ["redis-server", str(conf), "--sentinel"],
            sentinel_port,
            [*cli_tls, "-a", SENTINEL_PASSWORD, "--no-auth-warning"],
        )
        return data_port, sentinel_port


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    made = Servers(tmp_path)
    try:
        yield made
    finally:
        made.stop()


def target(sentinel_port: int, **fields: object) -> Target:
    return Target(
        sentinels=(("127.0.0.1", sentinel_port),),
        service=SERVICE,
        password=SecretStr(DATA_PASSWORD),
        retry_for_s=1.0,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.timeout(60)
async def test_a_sentinel_that_requires_a_password_is_reached_with_it(servers: Servers) -> None:
    _, sentinel_port = servers.pair()
    settings = Settings.from_environ(
        {
            "REDIS_SENTINELS": f"127.0.0.1:{sentinel_port}",
            "REDIS_SENTINEL_SERVICE": SERVICE,
            "REDIS_PASSWORD": DATA_PASSWORD,
            "REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD,
            "REDIS_RETRY_FOR_S": "1",
        }
    )
    async with Store.connect(settings.redis_target()) as store:
        assert await store.marks.count("through-a-guarded-sentinel") == 1
        await store.ping()

    # Without the sentinels' password, no primary is named: the store says so and
    # never shows either password.
    with pytest.raises(StoreError) as refused:
        async with Store.connect(target(sentinel_port)) as store:
            await store.marks.count("never")
    said = str(refused.value)
    assert f"sentinel {SERVICE} via 127.0.0.1:{sentinel_port}" in said, said
    assert "a sentinel refused the password (REDIS_SENTINEL_PASSWORD)" in said, said
    assert DATA_PASSWORD not in said and SENTINEL_PASSWORD not in said


@pytest.mark.timeout(60)
async def test_both_hops_over_tls_with_the_ca_file(servers: Servers, tmp_path: Path) -> None:
    ca, cert, key = make_ca_and_cert(tmp_path)
    data_port, sentinel_port = servers.pair(tls=(ca, cert, key))
    tls = target(
        sentinel_port,
        sentinel_password=SecretStr(SENTINEL_PASSWORD),
        sentinel_tls=True,
        tls=True,
        tls_ca_file=str(ca),
    )
    async with Store.connect(tls) as store:
        assert await store.marks.count("over-tls") == 1
        # redis-py leaves ConnectionPool.get_connection unannotated
        connection = await store.redis.connection_pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            assert type(connection).__name__ == "SentinelManagedSSLConnection"
            assert connection.port == data_port
        finally:
            await store.redis.connection_pool.release(connection)

    # The same sentinel without TLS on the sentinel hop: refused, not spoken to in clear.
    with pytest.raises(StoreError):
        async with Store.connect(
            target(sentinel_port, sentinel_password=SecretStr(SENTINEL_PASSWORD))
        ) as store:
            await store.marks.count("never")


@pytest.mark.timeout(60)
async def test_a_sentinel_acl_user_is_reached_by_its_name(servers: Servers) -> None:
    _, sentinel_port = servers.pair(acl_user="trainbot-sentinel")
    settings = Settings.from_environ(
        {
            "REDIS_SENTINELS": f"127.0.0.1:{sentinel_port}",
            "REDIS_SENTINEL_SERVICE": SERVICE,
            "REDIS_PASSWORD": DATA_PASSWORD,
            "REDIS_SENTINEL_USERNAME": "trainbot-sentinel",
            "REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD,
            "REDIS_RETRY_FOR_S": "1",
        }
    )
    async with Store.connect(settings.redis_target()) as store:
        assert await store.marks.count("through-an-acl-user") == 1
    with pytest.raises(StoreError, match="a sentinel refused the password"):
        wrong = target(
            sentinel_port,
            sentinel_username="someone-else",
            sentinel_password=SecretStr(SENTINEL_PASSWORD),
        )
        async with Store.connect(wrong) as store:
            await store.marks.count("never")


@pytest.mark.timeout(60)
async def test_a_plain_rediss_url_is_verified_with_the_ca_file(
    servers: Servers, tmp_path: Path
) -> None:
    """Without Sentinel: ``rediss://`` and ``REDIS_TLS_CA_CERT``; the password stays out
    of the URL (``REDIS_PASSWORD``)."""
    ca, cert, key = make_ca_and_cert(tmp_path)
    data_port, _ = servers.pair(tls=(ca, cert, key))
    settings = Settings.from_environ(
        {
            "REDIS_URL": f"rediss://127.0.0.1:{data_port}/0",
            "REDIS_PASSWORD": DATA_PASSWORD,
            "REDIS_TLS_CA_CERT": str(ca),
        }
    )
    async with Store.connect(settings.redis_target()) as store:
        assert await store.marks.count("plain-tls") == 1
    with pytest.raises(StoreError):  # the system's CAs do not know the test's CA
        plain = Target(url=f"rediss://127.0.0.1:{data_port}/0", password=SecretStr(DATA_PASSWORD))
        async with Store.connect(plain) as store:
            await store.marks.count("never")
