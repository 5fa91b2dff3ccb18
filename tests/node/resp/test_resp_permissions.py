"""Redis pattern subscriptions under subscribe permissions: a pattern is allowed exactly when every
channel it can match could be subscribed to on its own (``PermissionSet.can_psubscribe``), in
process and with redis-py against a real node."""

from __future__ import annotations

import pytest
import redis
import trio
from hypothesis import given
from hypothesis import strategies as st

from node.accounts.permissions import PermissionSet
from node.broker import Broker
from node.config.options import Config, Permissions, SubjectRule, UserConfig
from routing import channel_subject
from tests.node.resp.test_resp_clients import W, next_message, sync_client
from tests.node.resp.test_resp_connection import Peer
from tests.support import start_redis_node

ORDERS = Permissions(subscribe=SubjectRule(allow=("orders.>",)))


def escaped(channel: bytes) -> bytes:
    """The glob that matches exactly this channel."""
    return b"".join(b"\\%c" % byte for byte in channel)


@given(
    channel=st.binary(max_size=6) | st.sampled_from([b"orders.eu", b"orders.", b"secret.x", b"$R.x"]),
    allow=st.sampled_from([(), ("orders.>",), ("orders.> q",), ("*.eu", "$R.*"), (">",)]),
    deny=st.sampled_from([(), ("secret.>",), ("orders.eu",), ("orders.eu q",), ("$R.>",)]),
)
def test_a_literal_pattern_is_allowed_as_its_channel_is(
    channel: bytes, allow: tuple[str, ...], deny: tuple[str, ...]
) -> None:
    """Against the trie that checks SUBSCRIBE, queue entries included (they never apply)."""
    perms = PermissionSet(Permissions(subscribe=SubjectRule(allow=allow, deny=deny)))
    allowed = perms.can_subscribe(channel_subject(channel).decode(), None)
    assert perms.can_psubscribe(escaped(channel)) == allowed
    assert perms.refused_channel(escaped(channel)) == (None if allowed else channel)


def test_queue_entries_do_not_apply_to_channels() -> None:
    queue_only = PermissionSet(Permissions(subscribe=SubjectRule(allow=("orders.> workers",))))
    assert not queue_only.can_psubscribe(b"orders.[a-z]")  # an allow list that allows no channel
    queue_deny = PermissionSet(Permissions(subscribe=SubjectRule(deny=("secret.> workers",))))
    assert queue_deny.can_psubscribe(b"secret.*")
    publish_only = PermissionSet(Permissions(publish=SubjectRule(allow=("x",))))
    assert publish_only.can_psubscribe(b"*")


def test_refusals_name_a_channel() -> None:
    users = (UserConfig(user="alice", password="pw", permissions=ORDERS),)
    peer = Peer(Broker(Config(users=users)))
    assert peer.send("AUTH", "alice", "pw") == b"+OK\r\n"
    # '*' matches no byte at all too: "orders." has an empty token, so it travels under "$R.".
    assert peer.send("PSUBSCRIBE", "orders.[a-z][a-z]", "orders.*") == (
        b"-NOPERM No permissions to access the 'orders.*' pattern: it matches the channel "
        b"'orders.', which is not allowed\r\n"
    )
    assert not peer.conn.subscribed  # all or nothing, as SUBSCRIBE
    assert peer.send("PSUBSCRIBE", "orders.?").endswith(
        b"the channel 'orders. ', which is not allowed\r\n"
    )
    assert peer.send("PSUBSCRIBE", "*").endswith(b"the channel 'a', which is not allowed\r\n")
    assert peer.send("PSUBSCRIBE", b"*a" + b"?" * 20) == (
        b"-NOPERM No permissions to access the '*a" + b"?" * 20 + b"' pattern: too complex to check "
        b"against this user's subscribe permissions\r\n"
    )
    assert peer.send("PSUBSCRIBE", "orders.[a-z][a-z]", "orders.[0-9]") == (
        b"*3\r\n$10\r\npsubscribe\r\n$17\r\norders.[a-z][a-z]\r\n:1\r\n"
        b"*3\r\n$10\r\npsubscribe\r\n$12\r\norders.[0-9]\r\n:2\r\n"
    )


async def test_pattern_permissions_with_redis_py(nursery: trio.Nursery) -> None:
    users = (
        UserConfig(user="alice", password="pw", permissions=ORDERS),
        UserConfig(
            user="bob", password="pw", permissions=Permissions(subscribe=SubjectRule(deny=("secret.>",)))
        ),
        UserConfig(user="pub", password="pw"),
    )
    node = await start_redis_node(nursery, Config(users=users))

    def scenario() -> None:
        alice = sync_client(node, username="alice", password="pw")
        with pytest.raises(
            redis.exceptions.NoPermissionError, match=r"'orders\.\*' pattern.*'orders\.'"
        ):
            alice.execute_command("PSUBSCRIBE", "orders.*")
        bob = sync_client(node, username="bob", password="pw")
        with pytest.raises(redis.exceptions.NoPermissionError, match=r"'s\*' pattern.*'secret\.a'"):
            bob.execute_command("PSUBSCRIBE", "s*")
        pub = sync_client(node, username="pub", password="pw")
        alice_ps, bob_ps = alice.pubsub(), bob.pubsub()
        alice_ps.psubscribe("orders.[a-z][a-z]")
        bob_ps.psubscribe("news.*")
        assert alice_ps.get_message(timeout=W) is not None
        assert bob_ps.get_message(timeout=W) is not None
        assert pub.publish("orders.abc", "no") == 0
        assert pub.publish("orders.eu", "yes") == 1
        assert next_message(alice_ps) == {
            "type": "pmessage",
            "pattern": b"orders.[a-z][a-z]",
            "channel": b"orders.eu",
            "data": b"yes",
        }
        assert pub.publish("news.a b", "spaced") == 1  # under "$R.", which bob may subscribe to
        assert next_message(bob_ps)["channel"] == b"news.a b"
        for client in (alice_ps, bob_ps, alice, bob, pub):
            client.close()

    await trio.to_thread.run_sync(scenario)
