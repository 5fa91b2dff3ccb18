"""Where keys live: Redis Cluster's hash slots, and the replica groups that hold them.

**Slots.** A key belongs to one of ``SLOTS`` (16384) hash slots, as in Redis Cluster: the CRC16
(XMODEM: polynomial 0x1021, initial value 0) of the key, modulo 16384. A hash tag narrows what is
hashed: if the key has a ``{``, and a ``}`` somewhere after that first ``{``, with at least one
byte between them, only the bytes between that first ``{`` and the first ``}`` after it are hashed
(so ``{user1}.a`` and ``{user1}.b`` share a slot); otherwise (no ``{``, no ``}`` after it, or
``{}``) the whole key is.

**Layout.** Given the cluster's members (server names, in an order identical on every node) and
the replicas per key ``N``, the layout has one replica group per member: group ``i`` holds the
contiguous slot range ``[SLOTS * i // M, SLOTS * (i + 1) // M)`` and its voters are members
``i, i+1, ..., i+N-1`` (wrapping around), so with ``N`` = ``M`` every node holds everything and
each node is listed first in one group (leadership spreads once elections settle).

**Agreement.** The layout is a pure function of (members, replicas), so nodes configured alike
compute the same one; nodes configured differently must not mix their groups. The layout's
``fingerprint`` (a digest of its members, replicas and slot ranges) is part of every group's name
(``keys-<i>-<fingerprint>``), and a RAFT frame names its group: a node drops frames for groups it
has not formed, so two nodes whose layouts differ never take each other's Raft messages, however
their group numbers line up. ``refusal`` says, for a frame's group name, whether it is another
layout's, so the receiving node can log that the peer's configuration differs (rather than drop
the frames silently). Changing a live layout (adding a member) is a membership change of the
groups and a move of slots, which this module does not do.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Sequence

import attrs

__all__ = ["SLOTS", "Layout", "SlotGroup", "hash_slot", "layout"]

SLOTS = 16384
_PREFIX = "keys-"


def hash_slot(key: bytes) -> int:
    """The hash slot of ``key``, as Redis Cluster's ``CLUSTER KEYSLOT`` answers."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key, 0) & (SLOTS - 1)


@attrs.frozen
class SlotGroup:
    """One replica group of a layout: its name, the slots ``[first, end)`` and its voters."""

    name: str
    first: int
    end: int
    voters: tuple[str, ...]
    """By server name, the first the one the group's number chose."""


@attrs.frozen
class Layout:
    """Which group holds each slot; ``fingerprint`` identifies the layout (see the docstring)."""

    members: tuple[str, ...]
    replicas: int
    fingerprint: str
    groups: tuple[SlotGroup, ...]

    def group_of_slot(self, slot: int) -> SlotGroup:
        count = len(self.groups)
        index = slot * count // SLOTS
        # (the ranges are floor(SLOTS * i / count): the guess is exact or one too high)
        while self.groups[index].first > slot:
            index -= 1
        return self.groups[index]

    def group_of(self, key: bytes) -> SlotGroup:
        return self.group_of_slot(hash_slot(key))

    def groups_of(self, node: str) -> list[SlotGroup]:
        """The groups that list ``node`` as a voter."""
        return [group for group in self.groups if node in group.voters]

    def refusal(self, group: str) -> str | None:
        """Why a frame for ``group`` is not this layout's (None: it is, or is no keys group)."""
        if not group.startswith(_PREFIX) or any(g.name == group for g in self.groups):
            return None
        fingerprint = group.rpartition("-")[2]
        if fingerprint != self.fingerprint:
            return (
                f"group {group} belongs to a key layout with fingerprint {fingerprint}, "
                f"this node's is {self.fingerprint}: the members or replicas configured differ"
            )
        return f"group {group} is not a group of this node's key layout"


def layout(members: Sequence[str], replicas: int) -> Layout:
    """The layout of ``members`` (server names, in the cluster's agreed order) with ``replicas``
    voters per group.

    Raises:
        ValueError: no members, a member named twice or empty, or replicas not in 1..members.
    """
    names = tuple(members)
    if not names or len(set(names)) != len(names) or not all(names):
        raise ValueError("members must be distinct, non-empty server names (at least one)")
    if not 1 <= replicas <= len(names):
        raise ValueError(f"replicas must be between 1 and the {len(names)} members")
    count = len(names)
    ranges = [(SLOTS * i // count, SLOTS * (i + 1) // count) for i in range(count)]
    voters = [tuple(names[(i + j) % count] for j in range(replicas)) for i in range(count)]
    digest = hashlib.sha256(repr((names, replicas, ranges, voters)).encode()).hexdigest()[:12]
    groups = tuple(
        SlotGroup(f"{_PREFIX}{i}-{digest}", first, end, voters[i])
        for i, (first, end) in enumerate(ranges)
    )
    return Layout(names, replicas, digest, groups)
