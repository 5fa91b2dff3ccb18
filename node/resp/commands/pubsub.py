"""The pub/sub commands (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs, PUBLISH,
SPUBLISH, PUBSUB), as redis-server 7.2 answers them. The subscriptions are the connection's
(``subs``, ``shard``, ``patterns``), and so is delivering what they receive.

**One namespace.** A channel is a subject (``routing.channels``): SUBSCRIBE adds an ordinary
subscription to the account, so NATS publishes reach it and its interest crosses routes and
gateways like any other; PUBLISH goes through ``Broker.publish``. Deliveries always show the
channel's own bytes. Headers and a NATS message's reply subject are not shown to Redis clients.
Pattern subscriptions (PSUBSCRIBE) keep Redis's glob language and are matched by the broker for
publishes made on this node only (they are not announced to other nodes). ``PUBLISH`` answers the
receivers reached on this node, as Redis Cluster does: channel and pattern subscribers, Redis and
NATS clients alike.

**Permissions.** Publishing or subscribing to a channel the user may not is refused with
``-NOPERM``, and so is a PSUBSCRIBE pattern that could match any channel the user could not
SUBSCRIBE to (``routing.reach`` decides it exactly; the error names such a channel).
"""

from __future__ import annotations

from typing import Final

from node.connection import MAX_SUBS_EXCEEDED
from node.resp.commands.common import help_reply, resp_clients
from node.resp.connection import Handler, RespConnection
from node.resp.dispatch import Command
from node.resp.writer import array, as_text, bulk, integer
from routing import Message, Subscription, channel_subject, glob_match
from routing.glob import MAX_PATTERN

__all__ = ["COMMANDS"]

_REMEMBERED_CHANNEL: Final = 256
"""A publisher's last channel is remembered with its subject, since publishers tend to repeat
one (when no longer than this: a huge one would be held on to after its request)."""


def _pattern_refusal(pattern: bytes, channel: bytes | None) -> str:
    """Why a pattern was refused: a channel it can match that the user may not subscribe to."""
    quoted = f"No permissions to access the '{as_text(pattern)}' pattern"
    if channel is None:
        return f"-NOPERM {quoted}: too complex to check against this user's subscribe permissions"
    return f"-NOPERM {quoted}: it matches the channel '{as_text(channel[:128])}', which is not allowed"


def _may_subscribe(conn: RespConnection, channels: list[bytes]) -> bool:
    """Whether the user may subscribe to all of them; refuses the command if not."""
    perms = conn.perms
    if perms is None:
        return True
    for channel in channels:
        if not perms.can_subscribe(channel_subject(channel).decode(), None):
            conn.error(f"-NOPERM No permissions to access the '{as_text(channel)}' channel")
            return False
    return True


def _at_limit(conn: RespConnection) -> bool:
    """Whether one more subscription would pass ``max_subscriptions``, channels, shard channels
    and patterns counted together; refuses the command if so (what it took so far stays)."""
    limit = conn.broker.config.max_subscriptions
    if limit and len(conn.subs) + len(conn.shard) + len(conn.patterns) >= limit:
        conn.error(MAX_SUBS_EXCEEDED)
        return True
    return False


def _count(conn: RespConnection) -> int:
    """Channels plus patterns, as subscribe acknowledgements count them."""
    return len(conn.subs) + len(conn.patterns)


def _subscribe(shard: bool) -> Handler:
    """SUBSCRIBE, or SSUBSCRIBE (``shard``)."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        channels = args[1:]
        if not _may_subscribe(conn, channels):
            return
        table = conn.shard if shard else conn.subs
        for channel in channels:
            sub = table.get(channel)
            if sub is None:
                if _at_limit(conn):
                    return
                sub = Subscription(channel_subject(channel).decode(), sid=channel, owner=conn)
                conn.broker.subscribe(conn.account, sub)
                table[channel] = sub
            if shard:
                conn.send(conn.writer.subscription(b"ssubscribe", channel, len(conn.shard)))
            else:
                conn.send(conn.writer.subscription(b"subscribe", channel, _count(conn)))

    return handler


def _unsubscribe(shard: bool) -> Handler:
    """UNSUBSCRIBE, or SUNSUBSCRIBE (``shard``)."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        channels = args[1:]
        table = conn.shard if shard else conn.subs
        kind = b"sunsubscribe" if shard else b"unsubscribe"
        if not channels:
            channels = list(table)
            if not channels:
                conn.send(conn.writer.subscription(kind, None, len(table) if shard else _count(conn)))
                return
        for channel in channels:
            sub = table.pop(channel, None)
            if sub is not None:
                conn.broker.unsubscribe(conn.account, [sub])
            conn.send(conn.writer.subscription(kind, channel, len(table) if shard else _count(conn)))

    return handler


def _psubscribe(conn: RespConnection, args: list[bytes]) -> None:
    patterns = args[1:]
    for pattern in patterns:
        if len(pattern) > MAX_PATTERN:
            conn.error(f"pattern is longer than {MAX_PATTERN} bytes")
            return
    perms = conn.perms
    for pattern in patterns:
        if perms is not None and not perms.can_psubscribe(pattern):
            conn.error(_pattern_refusal(pattern, perms.refused_channel(pattern)))
            return
    for pattern in patterns:
        if pattern not in conn.patterns:
            if _at_limit(conn):
                return
            conn.patterns[pattern] = None
            conn.broker.subscribe_pattern(conn.account, pattern, conn)
        conn.send(conn.writer.subscription(b"psubscribe", pattern, _count(conn)))


def _punsubscribe(conn: RespConnection, args: list[bytes]) -> None:
    patterns = args[1:]
    if not patterns:
        patterns = list(conn.patterns)
        if not patterns:
            conn.send(conn.writer.subscription(b"punsubscribe", None, _count(conn)))
            return
    for pattern in patterns:
        if conn.patterns.pop(pattern, 0) is None:
            conn.broker.unsubscribe_pattern(conn.account, pattern, conn)
        conn.send(conn.writer.subscription(b"punsubscribe", pattern, _count(conn)))


def _publish(conn: RespConnection, args: list[bytes]) -> None:
    """PUBLISH and SPUBLISH."""
    channel, payload = args[1], args[2]
    if channel == conn.last_channel and channel:
        subject = conn.last_subject
    else:
        subject = channel_subject(channel)
        if len(channel) <= _REMEMBERED_CHANNEL:
            conn.last_channel, conn.last_subject = channel, subject
    if conn.perms is not None and not conn.perms.can_publish(subject):
        conn.error(f"-NOPERM No permissions to access the '{as_text(channel)}' channel")
        return
    conn.in_msgs += 1
    conn.in_bytes += len(payload)
    count, _ = conn.broker.publish_counted(conn.account, Message(subject, None, None, payload))
    conn.reply(integer(count))


def _channels(shard: bool) -> Handler:
    """PUBSUB CHANNELS, or PUBSUB SHARDCHANNELS (``shard``)."""
    name = "pubsub|shardchannels" if shard else "pubsub|channels"

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        if len(args) > 3:
            conn.error(f"wrong number of arguments for '{name}' command")
            return
        seen: dict[bytes, None] = {}
        for client in resp_clients(conn):
            table = client.shard if shard else client.subs
            for channel in table:
                seen[channel] = None
        pattern = args[2] if len(args) > 2 else None
        conn.reply(array(bulk(c) for c in seen if pattern is None or glob_match(pattern, c)))

    return handler


def _numsub(shard: bool) -> Handler:
    """PUBSUB NUMSUB, or PUBSUB SHARDNUMSUB (``shard``)."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        clients = resp_clients(conn)
        items = []
        for channel in args[2:]:
            count = sum(1 for c in clients if channel in (c.shard if shard else c.subs))
            items += [bulk(channel), integer(count)]
        conn.reply(array(items))

    return handler


def _pubsub_numpat(conn: RespConnection, args: list[bytes]) -> None:
    patterns = conn.account.patterns
    conn.reply(integer(len(patterns) if patterns is not None else 0))


_PUBSUB_HELP = [
    b"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CHANNELS [<pattern>]",
    b"    Return the currently active channels matching a <pattern> (default: '*').",
    b"NUMPAT",
    b"    Return number of subscriptions to patterns.",
    b"NUMSUB [<channel> ...]",
    b"    Return the number of subscribers for the specified channels, excluding",
    b"    pattern subscriptions(default: no channels).",
    b"SHARDCHANNELS [<pattern>]",
    b"    Return the currently active shard level channels matching a <pattern> (default: '*').",
    b"SHARDNUMSUB [<shardchannel> ...]",
    b"    Return the number of subscribers for the specified shard level channel(s)",
    b"HELP",
    b"    Prints this help.",
]
COMMANDS: Final = (
    Command("subscribe", -2, _subscribe(shard=False), "subscribed noscript"),
    Command("unsubscribe", -1, _unsubscribe(shard=False), "subscribed noscript"),
    Command("psubscribe", -2, _psubscribe, "subscribed noscript"),
    Command("punsubscribe", -1, _punsubscribe, "subscribed noscript"),
    Command("ssubscribe", -2, _subscribe(shard=True), "subscribed noscript", keys=(1, -1, 1)),
    Command("sunsubscribe", -1, _unsubscribe(shard=True), "subscribed noscript", keys=(1, -1, 1)),
    Command("publish", 3, _publish),
    Command("spublish", 3, _publish, keys=(1, 1, 1)),
    Command(
        "pubsub",
        -2,
        None,
        subcommands=[
            Command("pubsub|channels", -2, _channels(shard=False)),
            Command("pubsub|numsub", -2, _numsub(shard=False)),
            Command("pubsub|numpat", 2, _pubsub_numpat),
            Command("pubsub|shardchannels", -2, _channels(shard=True)),
            Command("pubsub|shardnumsub", -2, _numsub(shard=True)),
            Command("pubsub|help", 2, help_reply(_PUBSUB_HELP)),
        ],
    ),
)
"""The pub/sub commands, in COMMAND's order."""
