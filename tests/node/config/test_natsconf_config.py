"""``pubmesh serve -c`` with nats-server's configuration format: a production file means the same as
its TOML twin, unknown options are refused at their file and line with a hint, and a node starts
from a ``.conf`` file."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from node.config.load import from_mapping, load
from node.config.options import Config, ConfigError
from node.run.cli import main
from tests.certs import Certs
from tests.live import live_node

NATS = """
# east-1: one node of the east cluster, in a super-cluster with west and south
server_name: east-1
listen: 127.0.0.1:4222
http: 127.0.0.1:8222
max_payload: 2MB
max_pending: 64MB
max_connections: 10K
max_subs: 1000
ping_interval: "30s"
ping_max: 3
write_deadline: "5s"

tls {
  cert_file: "{dir}/node.pem"
  key_file: "{dir}/node-key.pem"
  ca_file: "{dir}/ca.pem"
  verify: true
  timeout: 2
}

cluster {
  name: east
  listen: 127.0.0.1:6222
  routes: [
    nats://127.0.0.1:6223
    nats://127.0.0.1:6224
  ]
  tls {
    cert_file: "{dir}/node.pem"
    key_file: "{dir}/node-key.pem"
    ca_file: "{dir}/ca.pem"
    timeout: "1.5s"
  }
}

gateway {
  name: east
  listen: 127.0.0.1:7222
  gateways: [
    {name: west, url: "nats://127.0.0.1:7322"}
    {name: south, urls: ["nats://127.0.0.1:7422", "nats://127.0.0.1:7423"]}
  ]
}

SHOP_PASS: "s3cret"          # a variable, not an option
accounts {
  ORDERS: {
    users: [
      {
        user: shop, password: $SHOP_PASS
        permissions: {
          publish: { allow: ["orders.>"] }
          subscribe: { allow: ["orders.>", "_INBOX.>"], deny: "orders.audit" }
        }
      }
    ]
  }
  BILLING { users = [ {user: billing, password: $SHOP_PASS} ] }
}

authorization {
  users: [ {user: admin, password: "adminpw"} ]
  timeout: "3s"
}
no_auth_user: admin
"""

TOML = """
server_name = "east-1"
listen = "127.0.0.1:4222"
http = "127.0.0.1:8222"
max_payload = "2MB"
max_pending = "64MiB"
max_connections = 10000
max_subscriptions = 1000
ping_interval = "30s"
ping_max = 3
write_deadline = 5
no_auth_user = "admin"

[tls]
cert_file = "{dir}/node.pem"
key_file = "{dir}/node-key.pem"
ca_file = "{dir}/ca.pem"
verify = true
timeout = 2.0

[cluster]
name = "east"
listen = "127.0.0.1:6222"
routes = ["nats://127.0.0.1:6223", "nats://127.0.0.1:6224"]

[cluster.tls]
cert_file = "{dir}/node.pem"
key_file = "{dir}/node-key.pem"
ca_file = "{dir}/ca.pem"
timeout = 1.5

[gateway]
name = "east"
listen = "127.0.0.1:7222"
gateways = [
    { name = "west", url = "nats://127.0.0.1:7322" },
    { name = "south", urls = ["nats://127.0.0.1:7422", "nats://127.0.0.1:7423"] },
]

[[accounts.ORDERS.users]]
user = "shop"
password = "s3cret"
permissions.publish.allow = ["orders.>"]
permissions.subscribe.allow = ["orders.>", "_INBOX.>"]
permissions.subscribe.deny = ["orders.audit"]

[[accounts.BILLING.users]]
user = "billing"
password = "s3cret"

[authorization]
users = [{ user = "admin", password = "adminpw" }]
timeout = "3s"
"""


def write(path: Path, text: str, certs: Certs | None = None) -> Path:
    path.write_text(text.replace("{dir}", str(certs.dir)) if certs else text)
    return path


def test_a_production_file_means_the_same_in_both_formats(tmp_path: Path, certs: Certs) -> None:
    nats = load(write(tmp_path / "east.conf", NATS, certs))
    toml = load(write(tmp_path / "east.toml", TOML, certs))
    assert nats == toml
    assert (nats.max_payload, nats.max_pending, nats.max_connections) == (
        2 * 1024**2,
        64 * 1024**2,
        10_000,
    )
    assert (nats.ping_interval, nats.write_deadline, nats.auth_timeout) == (30.0, 5.0, 3.0)
    assert nats.cluster is not None
    assert nats.cluster.tls is not None
    assert nats.cluster.tls.timeout == 1.5
    assert nats.gateway is not None
    assert [name for name, _ in nats.gateway.gateways] == ["west", "south"]
    assert [(u.user, u.account) for u in nats.users] == [
        ("shop", "ORDERS"), ("billing", "BILLING"), ("admin", "$G"),
    ]  # fmt: skip
    shop = nats.users[0].permissions
    assert shop is not None
    assert shop.subscribe.deny == ("orders.audit",)
    assert nats != Config()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server is not installed")
def test_nats_server_accepts_the_production_file(tmp_path: Path, certs: Certs) -> None:
    """The file is nats-server's language as nats-server itself reads it (``-t`` checks a file)."""
    path = write(tmp_path / "east.conf", NATS, certs)
    done = subprocess.run(
        ["nats-server", "-t", "-c", str(path)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_format_is_chosen_by_name_then_by_content(tmp_path: Path) -> None:
    nats_text = "port: 4333\nmax_payload: 1KB\n"
    toml_text = "port = 4333\nmax_payload = '1KB'\n"
    expected = Config(port=4333, max_payload=1024)
    assert load(write(tmp_path / "a.conf", nats_text)) == expected
    assert load(write(tmp_path / "a.toml", toml_text)) == expected
    assert load(write(tmp_path / "nats.cfg", nats_text)) == expected  # not TOML, so nats-server's
    assert load(write(tmp_path / "toml.cfg", toml_text)) == expected
    with pytest.raises(ConfigError, match=r"b\.toml: .*line 1"):  # named TOML: TOML's error
        load(write(tmp_path / "b.toml", nats_text))
    with pytest.raises(ConfigError, match=r"c\.cfg:2: .*\(nor is it TOML: "):
        load(write(tmp_path / "c.cfg", "port: [\n"))
    with pytest.raises(
        ConfigError, match=r"d\.conf:1: expected a key, got '\[' \(it is TOML: name it \*\.toml\)"
    ):
        load(write(tmp_path / "d.conf", "[cluster]\nname = 'a'\n"))


def test_includes_and_environment_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUBMESH_TEST_PORT", "4999")
    (tmp_path / "conf.d").mkdir()
    write(tmp_path / "conf.d" / "auth.conf", "authorization { token: $TOKEN }\n")
    main = write(
        tmp_path / "main.conf", "TOKEN: t0k\nport: $PUBMESH_TEST_PORT\ninclude conf.d/auth.conf\n"
    )
    with pytest.raises(ConfigError, match=r"auth\.conf:1: variable 'TOKEN' is not defined"):
        load(main)  # an included file does not see the includer's variables, only the environment
    monkeypatch.setenv("TOKEN", "t0k")
    write(main, "port: $PUBMESH_TEST_PORT\ninclude conf.d/auth.conf\n")
    config = load(main)
    assert config.port == 4999
    assert [u.token for u in config.users] == ["t0k"]


def error_of(tmp_path: Path, text: str, name: str = "bad.conf") -> str:
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path / name, text))
    return str(caught.value)


BAD_FILES = [
    (
        "port: 4222\nmax_paylod: 1MB\n",
        "bad.conf:2: unknown option 'max_paylod' (did you mean 'max_payload'?)",
    ),
    (
        "cluster {\n  name: a\n  pool_sise: 2\n}\n",
        "bad.conf:3: unknown option 'pool_sise' (did you mean 'pool_size'?)",
    ),
    (
        "jetstream {\n  store_dir: /tmp\n}\n",
        "bad.conf:1: unknown option 'jetstream' (a nats-server option pubmesh does not support)",
    ),
    (
        "leafnodes { port: 7422 }",
        "bad.conf:1: unknown option 'leafnodes' (a nats-server option",
    ),
    (
        "websocket { port: 8080 }",
        "unknown option 'websocket' (a nats-server option",
    ),
    (
        "cluster {\n  authorization { user: r, password: p }\n}",
        "bad.conf:2: unknown option 'authorization' (pubmesh authenticates routes and gateways with",
    ),
    (
        "tls {\n  cert_file: a\n  cipher_suites: []\n}",
        "bad.conf:3: unknown option 'cipher_suites' (a nats-server option",
    ),
    (
        "accounts {\n  A {\n    users: []\n    jetstream: enabled\n  }\n}",
        "bad.conf:4: unknown option 'jetstream'",
    ),
    (
        "authorization {\n  users: [\n    {user: a, password: b, nkey: x}\n  ]\n}",
        "bad.conf:3: unknown option 'nkey'",
    ),
    (
        "authorization {\n  users: [\n    {user: a, password: b, permissions: {publsh: x}}\n  ]\n}",
        "bad.conf:3: unknown option 'publsh' (did you mean 'publish'?)",
    ),
    (
        "gateway {\n  name: a\n  gateways: [\n    {name: b, uri: 'nats://h:1'}\n  ]\n}",
        "bad.conf:4: unknown option 'uri' (did you mean 'url'?)",
    ),
    (
        "frobnicate: 1",
        "bad.conf:1: unknown option 'frobnicate'",
    ),
    (
        "port: 1\ninclude missing.conf\n",
        "bad.conf:2: cannot read include 'missing.conf'",
    ),
    (
        "port: $PUBMESH_SURELY_UNSET\n",
        "bad.conf:1: variable 'PUBMESH_SURELY_UNSET' is not defined",
    ),
    (
        'ping_interval: "2 minutes"',
        "bad.conf: ping_interval: expected a duration such as '1.5s' or '2m', got '2 minutes'",
    ),
    (
        "write_deadline: yes",
        "bad.conf: write_deadline: expected float, got True",
    ),
    (
        'max_payload: "lots"',
        "bad.conf: max_payload: expected a size such as '64KB' or '2MB', got 'lots'",
    ),
    (
        'authorization { timeout: "soon" }',
        "authorization.timeout: expected a duration",
    ),
    (
        'port: "4222"',
        "bad.conf: port: expected int, got '4222'",
    ),
    (
        "authorization {\n  users: [ {user: a, password: b} ]\n}\nno_auth_user: nobody\n",
        "no_auth_user: 'nobody' is not a user",
    ),
    (
        "no_auth_user: nobody\n",
        "no_auth_user: 'nobody' is not a user",
    ),
]
"""A file and (part of) the error it is refused with."""


@pytest.mark.parametrize(("text", "error"), BAD_FILES)
def test_bad_files_are_refused_saying_where_and_why(tmp_path: Path, text: str, error: str) -> None:
    assert error in error_of(tmp_path, text)


def test_an_error_in_an_included_file_names_that_file(tmp_path: Path) -> None:
    write(tmp_path / "cluster.conf", "# the cluster\ncluster {\n  name: a\n  colour: red\n}\n")
    error = error_of(tmp_path, "port: 1\ninclude ./cluster.conf\n", "main.conf")
    assert re.fullmatch(r".*/cluster\.conf:4: unknown option 'colour'.*", error), error


def test_cluster_and_gateway_ports_alone(tmp_path: Path) -> None:
    text = "cluster { host: 127.0.0.2, port: 6333 }\ngateway { name: g, port: 7333 }\n"
    config = load(write(tmp_path / "ports.conf", text))
    assert config.cluster is not None
    assert (config.cluster.host, config.cluster.port) == ("127.0.0.2", 6333)
    assert config.gateway is not None
    assert config.gateway.port == 7333


def test_variables_are_not_options_but_known_options_still_count(tmp_path: Path) -> None:
    text = "PORT: 4555\nport: $PORT\nhttp_port: $PORT\nUNUSED: 1\n"
    assert "bad.conf:4: unknown option 'UNUSED'" in error_of(tmp_path, text)
    config = load(write(tmp_path / "ok.conf", text.replace("UNUSED: 1\n", "")))
    assert (config.port, config.http_port) == (4555, 4555)


def test_durations_and_sizes_in_toml() -> None:
    config = from_mapping(
        {
            "ping_interval": "1m30s",
            "write_deadline": "250ms",
            "max_pending": "32MB",
            "max_control_line": "4KiB",
            "authorization": {"token": "t", "timeout": 1},
            "gateway": {"name": "g", "reply_ttl": "10s", "max_pending": "1GB"},
            "redis": {"hard_limit": "64mb", "soft_limit": "8MB", "soft_seconds": "1m"},
        }
    )
    assert (config.ping_interval, config.write_deadline, config.auth_timeout) == (90.0, 0.25, 1.0)
    assert (config.max_pending, config.max_control_line) == (32 * 1024**2, 4096)
    assert config.gateway is not None
    assert (config.gateway.reply_ttl, config.gateway.max_pending) == (10.0, 1024**3)
    assert config.redis is not None
    assert (config.redis.hard_limit, config.redis.soft_limit, config.redis.soft_seconds) == (
        64 * 1024**2, 8 * 1024**2, 60.0,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="did you mean 'ping_interval'"):
        from_mapping({"ping_intervl": 1})


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_serve_starts_a_node_from_a_conf_file(tmp_path: Path) -> None:
    conf = write(tmp_path / "node.conf", 'NAME: "from-conf"\nserver_name: $NAME\nmax_payload: 2KB\n')
    with live_node("-c", str(conf)) as node:
        status, body = node.http_get("/varz")
        assert status == 200
        assert b'"server_name": "from-conf"' in body
        assert b'"max_payload": 2048' in body


def test_serve_refuses_a_bad_file_saying_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write(tmp_path / "node.conf", "port: 4222\ncluster {\n  nmae: east\n}\n")
    assert main(["serve", "-c", str(conf)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(f"[FTL] {conf}:3: unknown option 'nmae' (did you mean 'name'?)")
