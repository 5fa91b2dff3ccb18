"""Changes made to a group's keys on this node, proposed to the group, and what waits on them.

``submit`` proposes the records a command made, at once: a group's entries keep the order of these
calls, which is the order the changes were made in. Awaiting its ``Answer`` gives the command's
reply once the entry is committed (acknowledged means replicated), else the cluster's error, and
the change is taken back (the group's keys are rebuilt from its log: ``spoiled``). ``settled``
holds the reply to a command that changed nothing until every change made here before it is
committed (it may have seen them): nothing a client is told rests on a write that may be taken
back. ``barrier`` is a group's read barrier (``Group.read_barrier``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from cluster.placement import SlotGroup
from cluster.replication.group import Group, GroupProposal, ProposalError
from cluster.replication.replicas import Replicas
from node.replicated.forwarded import CLUSTERDOWN
from node.replicated.machine import KeyspaceMachine
from node.resp.writer import error

__all__ = ["Answer", "Proposals"]

log = logging.getLogger("pubmesh")

Answer = Callable[[bytes], Awaitable[bytes]]
"""A submitted change's outcome: given its reply, that reply once committed, else the error."""


class Proposals:
    """This node's proposals of changes to its groups' keys (see the module's notes).

    Args:
        replicas: the node's replica groups.
        machines: each group's keyspace machine, by group name.
        spoiled: told of a group whose keys here hold a change it did not commit.
    """

    def __init__(
        self,
        replicas: Replicas,
        machines: Mapping[str, KeyspaceMachine],
        spoiled: Callable[[str], None],
    ) -> None:
        self._replicas = replicas
        self._machines = machines
        self._spoiled = spoiled
        self._latest: dict[str, tuple[Group, GroupProposal]] = {}
        """Per group, the last change this node made to its keys and proposed, until settled: a
        command that changed nothing but may have seen it waits for it."""

    def pending(self, group: str) -> bool:
        """Whether a change made here to the group's keys is not settled yet."""
        return group in self._latest

    def submit(self, group: SlotGroup, records: bytes) -> Answer:
        """Propose a change made here, at once: a group's entries keep the order of these calls,
        which is the order the changes were made in. Await the answer for the outcome: the reply
        given to it once committed, else the cluster's error (and the change is taken back)."""
        machine = self._machines[group.name]
        sequence, data = machine.begin(records)
        local = self._replicas.groups.get(group.name)
        failure: ProposalError | None = None
        proposal = None
        try:
            if local is None:
                raise ProposalError("the group is not running here")
            proposal = local.submit(data)
            self._latest[group.name] = (local, proposal)
        except ProposalError as exc:
            failure = exc

        async def answer(reply: bytes) -> bytes:
            try:
                if local is None or proposal is None:
                    raise failure or ProposalError("not proposed")
                await local.outcome(proposal)
                return reply
            except ProposalError as exc:
                log.warning("Group %s: a write was not committed: %s", group.name, exc)
                if machine.forget(sequence):
                    self._spoiled(group.name)
                return error(CLUSTERDOWN)
            finally:
                if self._latest.get(group.name, (None, None))[1] is proposal:
                    del self._latest[group.name]  # (the last change made here is settled)

        return answer

    def settled(self, group: SlotGroup) -> Answer:
        """For a command that changed nothing, which just ran: its reply once every change this
        node made to the group's keys before it is committed (it may have seen them; a change
        that is not committed in the end must not have been seen), else the cluster's error.
        What it waits for is taken now, not when the answer is awaited."""
        latest = self._latest.get(group.name)

        async def answer(reply: bytes) -> bytes:
            if latest is None:
                return reply
            local, proposal = latest
            try:
                await local.outcome(proposal)  # (committed: so is every entry before it)
            except ProposalError:
                return error(CLUSTERDOWN)
            return reply

        return answer

    async def barrier(self, group: SlotGroup) -> bool:
        """Whether a read of ``group``'s keys here is linearizable now (else: the cluster's error)."""
        local = self._replicas.groups.get(group.name)
        try:
            if local is None:
                raise ProposalError("the group is not running here")
            await local.read_barrier()
            return True
        except ProposalError as exc:
            log.info("Group %s: a read was not confirmed: %s", group.name, exc)
            return False
