"""Configuration from TOML files and from the command line, as ``pubmesh serve`` reads it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from cluster.config import ClusterConfig, GatewayConfig
from node.config.load import from_mapping
from node.config.options import ConfigError
from node.run.cli import command_line_config
from tests.certs import Certs
from transport.tls import TlsConfig

SUPERCLUSTER = """
server_name = "east-1"
listen = "127.0.0.1:4222"

[cluster]
name = "east"
listen = "127.0.0.1:6222"
routes = ["nats://127.0.0.1:6223"]

[gateway]
name = "east"
listen = "127.0.0.1:7222"
advertise = "nats://gw.example:7222"
ping_interval = 1.5
reply_ttl = 5.0
gateways = [
    { name = "west", url = "nats://127.0.0.1:7322" },
    { name = "south", urls = ["nats://127.0.0.1:7422", "nats://127.0.0.1:7423"] },
]
"""


def test_a_supercluster_node_from_toml() -> None:
    config = from_mapping(tomllib.loads(SUPERCLUSTER))
    assert config.cluster is not None
    assert (config.cluster.name, config.cluster.port, config.cluster.seeds) == (
        "east", 6222, ("nats://127.0.0.1:6223",),
    )  # fmt: skip
    assert config.gateway == GatewayConfig(
        name="east",
        host="127.0.0.1",
        port=7222,
        advertise="nats://gw.example:7222",
        ping_interval=1.5,
        reply_ttl=5.0,
        gateways=(
            ("west", ("nats://127.0.0.1:7322",)),
            ("south", ("nats://127.0.0.1:7422", "nats://127.0.0.1:7423")),
        ),
    )


@pytest.mark.parametrize(
    ("toml", "error"),
    [
        ("[gateway]\nlisten = '127.0.0.1:7222'", "a gateway needs a name"),
        ("[gateway]\nname = 'a'\ncolor = 'red'", "unknown option 'color'"),
        ("[gateway]\nname = 'a'\ngateways = 'b'", "gateways must be a list of tables"),
        ("[gateway]\nname = 'a'\ngateways = [{ url = 'nats://h:1' }]", "needs a name"),
        ("[gateway]\nname = 'a'\ngateways = [{ name = 'b' }]", "needs url or urls"),
        ("[gateway]\nname = 'a'\ngateways = [{ name = 'b', url = 'nats://nohost' }]", "nohost"),
        ("[gateway]\nname = 'a'\ngateways = [{ name = 'b', uri = 'x' }]", "did you mean 'url'"),
        ("[gateway]\nname = 'a'\nping_max = 'often'", "ping_max"),
        ("[cluster]\npool_size = 0", "pool_size must be at least 1"),
        ("[cluster]\nroutes = 'nats://h:1'", "routes must be a list"),
        ("colour = 1", "unknown option 'colour'"),
    ],
)
def test_bad_files_say_what_is_wrong(toml: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        from_mapping(tomllib.loads(toml))


def test_gateway_flags() -> None:
    config = command_line_config(
        [
            "--gateway_name", "east", "--gateway_listen", "nats://127.0.0.1:7222",
            "--gateways", "west=nats://127.0.0.1:7322,west=nats://127.0.0.1:7323,south=nats://h:7",
            "--gateway_advertise", "nats://gw.example:7222",
        ]
    )  # fmt: skip
    assert config.gateway == GatewayConfig(
        name="east",
        host="127.0.0.1",
        port=7222,
        advertise="nats://gw.example:7222",
        gateways=(
            ("west", ("nats://127.0.0.1:7322", "nats://127.0.0.1:7323")),
            ("south", ("nats://h:7",)),
        ),
    )
    assert config.cluster is None  # a cluster of one node needs no routes


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(SUPERCLUSTER)
    config = command_line_config(["-c", str(path), "--gateways", "north=nats://127.0.0.1:7522"])
    assert config.gateway is not None
    assert config.gateway.gateways == (("north", ("nats://127.0.0.1:7522",)),)
    assert config.gateway.port == 7222  # the rest of the file stands


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--gateways", "west=nats://h:1"], "need --gateway_name"),
        (["--gateway_name", "e", "--gateways", "west"], "expected NAME=URL"),
        (["--gateway_name", "e", "--gateways", "west=nats://nohost"], "nohost"),
        (["--gateway_name", "e", "--cluster_name", "f", "--cluster", "nats://h:1"], "conflicts"),
    ],
)
def test_bad_flags_say_what_is_wrong(argv: list[str], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        command_line_config(argv)


def test_links_may_cap_the_accounts_they_bring_into_being() -> None:
    config = from_mapping(
        tomllib.loads("[cluster]\nmax_accounts = 10\n[gateway]\nname = 'g'\nmax_accounts = 20\n")
    )
    assert config.cluster is not None
    assert config.gateway is not None
    assert (config.cluster.max_accounts, config.gateway.max_accounts) == (10, 20)


def test_a_cluster_left_unnamed_takes_the_gateway_name() -> None:
    config = command_line_config(["--gateway_name", "east", "--cluster", "nats://127.0.0.1:6222"])
    assert config.cluster is not None
    assert config.cluster.name == "east" != ClusterConfig().name


def test_tls_tables_for_clients_routes_gateways_and_https(certs: Certs) -> None:
    files = (
        f'cert_file = "{certs.cert("node")}"\nkey_file = "{certs.key("node")}"\nca_file = "{certs.ca}"'
    )
    config = from_mapping(
        tomllib.loads(
            f"https_port = 8443\n[tls]\n{files}\ntimeout = 1\n"
            "verify_and_map = true\nhandshake_first = true\n"
            f'[cluster]\nname = "c"\n[cluster.tls]\n{files}\nverify = true\n'
            f'[gateway]\nname = "c"\n[gateway.tls]\n{files}\n'
        )
    )
    assert config.tls == certs.tls("node", verify_and_map=True, handshake_first=True, timeout=1.0)
    assert config.https_port == 8443
    assert config.http_port is None
    assert config.cluster is not None
    assert config.cluster.tls == certs.tls("node", verify=True)
    assert config.gateway is not None
    assert config.gateway.tls == certs.tls("node")


@pytest.mark.parametrize(
    ("toml", "error"),
    [
        ("[tls]\nverify = true\n", "tls: TLS needs a certificate and a key"),
        ('[tls]\ncert_file = "/nonexistent.pem"\nkey_file = "/nonexistent.pem"\n', "tls: "),
        ("[tls]\nciphers = []\n", "unknown option 'ciphers'"),
        ("[cluster]\n[cluster.tls]\nverify_and_map = true\n", "unknown option 'verify_and_map'"),
        ("[gateway]\n[gateway.tls]\nhandshake_first = true\n", "unknown option 'handshake_first'"),
        ("[tls]\ntimeout = 0\n", "timeout must be positive"),
        ('[tls]\nverify = "yes"\n', "expected bool"),
        ("https_port = 8443\n", "TLS cert and key required for HTTPS"),
        ("http_port = 8222\nhttps = 8443\n", "can't specify both HTTP and HTTPS"),
    ],
)
def test_bad_tls_settings_say_what_is_wrong(toml: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        from_mapping(tomllib.loads(toml))


def test_tls_flags_as_nats_server_takes_them(certs: Certs) -> None:
    files = ["--tlscert", certs.cert("node"), "--tlskey", certs.key("node")]
    assert command_line_config(["--tls", *files]).tls == TlsConfig(
        cert_file=certs.cert("node"), key_file=certs.key("node")
    )
    config = command_line_config(["--tlsverify", *files, "--tlscacert", certs.ca, "-ms", "8443"])
    assert config.tls == certs.tls("node", verify=True)
    assert config.https_port == 8443
    assert command_line_config([]).tls is None
    with pytest.raises(ConfigError, match="TLS needs a certificate"):
        command_line_config(["--tls"])
    with pytest.raises(ConfigError, match="TLS cert and key required for HTTPS"):
        command_line_config(["--https_port", "8443"])


def test_the_replication_table_sets_raft_timing() -> None:
    config = from_mapping(
        tomllib.loads('[replication]\ntick = "50ms"\nelection_ticks = 20\npropose_timeout = "2s"\n')
    )
    assert config.replication.tick == pytest.approx(0.05)
    assert config.replication.election_ticks == 20
    assert config.replication.propose_timeout == 2.0
    assert from_mapping({}).replication.election_ticks == 10
    for bad in ("[replication]\nheartbeat_ticks = 10\n", "[replication]\nelection = 3\n"):
        with pytest.raises(ConfigError, match="replication"):
            from_mapping(tomllib.loads(bad))
