"""CLUSTER SLOTS, SHARDS, NODES, INFO, KEYSLOT, MYID, MYSHARDID, COUNTKEYSINSLOT and
GETKEYSINSLOT where keys live on replica groups, in redis-server 7.2's cluster-mode shapes,
describing the placement as it is.

Redis Cluster's terms map onto the layout (``cluster.placement``) so: a shard is a replica group
(its slot range), the group's leader is the shard's master and its other voters are replicas. A
node may lead one group and follow in others, so it can be a master of one range and a replica of
another (CLUSTER SLOTS and SHARDS say so per range; CLUSTER NODES, one line per node, calls it a
master of the ranges it leads, or else a replica of the leader of its first group). The leader of a
group this node holds no replica of is not known here: it is shown as that group's first voter,
where this node sends its commands. A group with no leader now (an election under way) is shown
led by its first voter too, and CLUSTER INFO's ``cluster_state`` is then ``fail``.

Node ids are 40 hex digits derived from the server name (the same on every node and across
restarts); shard ids likewise from the group's name. A node's address is where it takes Redis
clients: this node's own, the others' as their route HELLOs said (``RouteManager.redis_peers``);
the bus port is that of its route URL. Epochs are Raft terms. Ping times, message counts and link
buffers are 0: routes are not Redis Cluster's bus.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import attrs

from cluster.config import parse_url
from cluster.placement import SLOTS, Layout, SlotGroup, hash_slot
from cluster.replication.replicas import Replicas
from cluster.routes import RedisPeer
from node.integers import string2ll
from node.resp.commands.common import NOT_INTEGER, now_ms
from node.resp.connection import RespConnection
from node.resp.writer import OK, array, bulk, integer

__all__ = ["ClusterView", "node_id"]


def node_id(name: str) -> str:
    """The Redis Cluster node id of the server called ``name``."""
    return hashlib.sha1(b"pubmesh node " + name.encode()).hexdigest()


def _shard_id(group: SlotGroup) -> str:
    return hashlib.sha1(b"pubmesh shard " + group.name.encode()).hexdigest()


@attrs.frozen
class _Member:
    name: str
    ip: str
    port: int
    bus_port: int
    connected: bool
    """A link to it is up (always, for this node)."""

    @property
    def id(self) -> str:
        return node_id(self.name)


@attrs.frozen
class _Shard:
    group: SlotGroup
    master: str
    replicas: tuple[str, ...]
    led: bool
    """Whether the group has a leader now (as this node knows)."""
    term: int
    offsets: dict[str, int]
    """Each voter's replication offset as this node knows it (its log's match index)."""


class ClusterView:
    """Answers the CLUSTER subcommands that describe the cluster.

    Args:
        node: this node's server name.
        layout: the keys' placement.
        replicas: this node's replica groups (leaders, terms, indexes).
        me: this node as its peers know it (where it takes Redis clients, its route URL).
        peers: the route peers, with where they take Redis clients.
    """

    def __init__(
        self,
        layout: Layout,
        replicas: Replicas,
        me: RedisPeer,
        peers: Callable[[], list[RedisPeer]],
    ) -> None:
        self.node = me.name
        self.layout = layout
        self.replicas = replicas
        self._me = me
        self._peers = peers

    def answer(self, conn: RespConnection, args: list[bytes]) -> bool:
        """Answer CLUSTER ``args[1]`` (its arity checked); False: not one this describes."""
        sub = args[1].lower()
        if sub == b"slots":
            conn.reply(array(self._slots(conn)))
        elif sub == b"shards":
            members = self._members()
            conn.reply(array(self._shard(conn, members, shard) for shard in self._shards()))
        elif sub == b"nodes":
            conn.reply(conn.writer.verbatim(self._nodes().encode()))
        elif sub == b"info":
            conn.reply(conn.writer.verbatim(self._info().encode()))
        elif sub == b"keyslot":
            conn.reply(integer(hash_slot(args[2])))
        elif sub in (b"countkeysinslot", b"getkeysinslot"):
            self._keys_in_slot(conn, args)
        elif sub == b"failover":
            self._failover(conn, args)
        elif sub == b"myid":
            conn.reply(bulk(node_id(self.node).encode()))
        elif sub == b"myshardid":
            mine = self.layout.groups_of(self.node)
            conn.reply(bulk(_shard_id(mine[0] if mine else self.layout.groups[0]).encode()))
        else:
            return False
        return True

    def _failover(self, conn: RespConnection, args: list[bytes]) -> None:
        """CLUSTER FAILOVER [FORCE|TAKEOVER]: this node campaigns for every group it holds a
        follower replica of. Raft elects it only if its log is as complete as a majority's, so
        no acknowledged write is lost in any mode; the three differ only in redis-server."""
        if len(args) > 3 or (len(args) == 3 and args[2].lower() not in (b"force", b"takeover")):
            conn.error("syntax error")
        elif not self.replicas.take_over():
            conn.error("You should send CLUSTER FAILOVER to a replica")
        else:
            conn.reply(OK)

    def _keys_in_slot(self, conn: RespConnection, args: list[bytes]) -> None:
        """COUNTKEYSINSLOT and GETKEYSINSLOT, of this node's replicas (its keys, as a cluster
        node's): none in a slot of a group it holds no replica of."""
        numbers = [string2ll(arg) for arg in args[2:]]  # (the slot; GETKEYSINSLOT's count)
        if None in numbers:
            conn.error(NOT_INTEGER)
            return
        slot, *most = (n or 0 for n in numbers)
        if most and (not 0 <= slot < SLOTS or most[0] < 0):
            conn.error("Invalid slot or number of keys")
        elif not 0 <= slot < SLOTS:
            conn.error("Invalid slot")
        else:
            keys = [key for key in conn.database.live_keys(now_ms()) if hash_slot(key) == slot]
            conn.reply(array(bulk(key) for key in keys[: most[0]]) if most else integer(len(keys)))

    # -- what is known -----------------------------------------------------------------------

    def _members(self) -> dict[str, _Member]:
        known = {peer.name: peer for peer in self._peers()}
        known[self.node] = self._me
        members = {}
        for name in self.layout.members:
            peer = known.get(name)
            if peer is None:
                members[name] = _Member(name, "", 0, 0, False)
            else:
                ip, port = _address(peer.redis_url)
                members[name] = _Member(name, ip, port, _bus_port(peer.route_url), peer.connected)
        return members

    def _shards(self) -> list[_Shard]:
        shards = []
        for group in self.layout.groups:
            local = self.replicas.groups.get(group.name)
            status = local.status() if local is not None else None
            leader = status.leader if status is not None else None
            master = leader if leader in group.voters else group.voters[0]
            offsets = {}
            if status is not None:
                offsets = {peer.name: peer.match for peer in status.peers}
                offsets[self.node] = status.applied
            shards.append(
                _Shard(
                    group,
                    master,
                    tuple(v for v in group.voters if v != master),
                    led=status is None or leader is not None,
                    term=status.term if status is not None else 0,
                    offsets=offsets,
                )
            )
        return shards

    # -- the replies -------------------------------------------------------------------------

    def _slots(self, conn: RespConnection) -> list[bytes]:
        members = self._members()

        def entry(name: str) -> bytes:
            member = members[name]
            return array(
                [
                    bulk(member.ip.encode()),
                    integer(member.port),
                    bulk(member.id.encode()),
                    conn.writer.map([]),
                ]
            )

        rows: list[list[bytes]] = []
        last: tuple[str, frozenset[str]] | None = None
        for shard in self._shards():
            group = shard.group
            available = [n for n in shard.replicas if members[n].connected and members[n].port]
            holders = (shard.master, frozenset(available))
            if holders == last:  # (adjacent ranges of the same nodes are one, as in a cluster)
                rows[-1][1] = integer(group.end - 1)
                continue
            last = holders
            rows.append(
                [integer(group.first), integer(group.end - 1), *map(entry, (shard.master, *available))]
            )
        return [array(row) for row in rows]

    def _shard(self, conn: RespConnection, members: dict[str, _Member], shard: _Shard) -> bytes:
        writer = conn.writer
        nodes = []
        for name in (shard.master, *shard.replicas):
            member = members[name]
            offset = shard.offsets.get(name, 0)
            replica = name != shard.master
            if not member.connected:
                health = b"fail"
            elif replica and offset == 0:
                health = b"loading"
            else:
                health = b"online"
            fields = [(b"id", bulk(member.id.encode()))]
            if member.port:
                fields.append((b"port", integer(member.port)))
            fields += [
                (b"ip", bulk(member.ip.encode())),
                (b"endpoint", bulk(member.ip.encode())),
                (b"role", bulk(b"replica" if replica else b"master")),
                (b"replication-offset", integer(offset)),
                (b"health", bulk(health)),
            ]
            nodes.append(writer.map((bulk(key), value) for key, value in fields))
        slots = array([integer(shard.group.first), integer(shard.group.end - 1)])
        return writer.map([(bulk(b"slots"), slots), (bulk(b"nodes"), array(nodes))])

    def _nodes(self) -> str:
        members = self._members()
        shards = self._shards()
        now = int(time.time() * 1000)
        lines = []
        for member in members.values():
            led = [shard for shard in shards if shard.master == member.name]
            flags = ["myself"] if member.name == self.node else []
            if led:
                flags.append("master")
                master, epoch = "-", max(shard.term for shard in led)
            else:
                flags.append("slave")
                own = next((s for s in shards if member.name in s.group.voters), shards[0])
                master, epoch = node_id(own.master), own.term
            if not member.connected:
                flags.append("fail?")
            if not member.port:
                flags.append("noaddr")
            link = "connected" if member.connected else "disconnected"
            pong = now if member.connected else 0
            line = (
                f"{member.id} {member.ip}:{member.port}@{member.bus_port} {','.join(flags)} "
                f"{master} 0 {pong} {epoch} {link}"
            )
            for start, last in _ranges([(s.group.first, s.group.end - 1) for s in led]):
                line += f" {start}" if start == last else f" {start}-{last}"
            lines.append(line + "\n")
        return "".join(lines)

    def _info(self) -> str:
        shards = self._shards()
        ok = sum(s.group.end - s.group.first for s in shards if s.led)
        masters = {shard.master for shard in shards}
        mine = [shard for shard in shards if shard.master == self.node] or [
            next((s for s in shards if self.node in s.group.voters), shards[0])
        ]
        fields = [
            ("cluster_state", "ok" if ok == SLOTS else "fail"),
            ("cluster_slots_assigned", SLOTS),
            ("cluster_slots_ok", ok),
            ("cluster_slots_pfail", 0),
            ("cluster_slots_fail", SLOTS - ok),
            ("cluster_known_nodes", len(self.layout.members)),
            ("cluster_size", len(masters)),
            ("cluster_current_epoch", max(shard.term for shard in shards)),
            ("cluster_my_epoch", max(shard.term for shard in mine)),
            ("cluster_stats_messages_sent", 0),
            ("cluster_stats_messages_received", 0),
            ("total_cluster_links_buffer_limit_exceeded", 0),
        ]
        return "".join(f"{name}:{value}\r\n" for name, value in fields)


def _ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Slot ranges, in order, adjacent ones joined."""
    joined: list[tuple[int, int]] = []
    for first, last in ranges:
        if joined and joined[-1][1] + 1 == first:
            joined[-1] = (joined[-1][0], last)
        else:
            joined.append((first, last))
    return joined


def _address(url: str) -> tuple[str, int]:
    """(ip, port) of ``host:port`` (("", 0) if none)."""
    host, _, port = url.rpartition(":")
    if not port.isdigit():
        return "", 0
    return host.strip("[]"), int(port)


def _bus_port(route_url: str) -> int:
    try:
        return parse_url(route_url)[1]
    except ValueError:
        return 0
