"""A node that lost its disk: how it rejoins its group without costing the group a committed entry.

Raft's safety rests on stable storage: a vote granted and an entry acknowledged are promises about
what a node holds. A node whose store is gone (a disk replaced, a directory wiped) and that comes
back under the same name has forgotten those promises, and plain Raft then loses committed entries:
an entry committed by the leader and that node alone is, after the wipe, on the leader only; if
the leader is down, the third voter (which lacks it) asks the amnesiac node for its vote, gets it
(any log is at least as up to date as an empty one) and leads without the entry, which is then
overwritten everywhere. The leader, too, counts the amnesiac node's old acknowledgements.

**Recovering.** A node whose stored state is empty when it starts cannot tell a wiped disk from a
first start, so it assumes the worst: it is *recovering*, under a random nonzero ``nonce``
persisted in its hard state (a restart does not end a recovery). While recovering:

1. **It neither votes nor campaigns, unless the group is forming.** Its log may lack committed
   entries it had acknowledged, so its vote must not help elect anyone, nor may it lead. The one
   exception is a group's first election: a recovering node with an empty log votes for a
   candidate whose log is empty too, and may campaign while its own log is empty. An empty log
   on both sides means nothing was ever committed (short of more failures than the group
   tolerates: the candidate's store lost as well), so that vote, or winning, ends its recovery.
2. **It says so to the leader**: its append and heartbeat responses carry its nonce. A leader
   that hears a nonce it has not seen for that follower forgets what the follower acknowledged
   before (its ``match``: the old acknowledgements were the lost disk's) and probes its log afresh,
   and takes note of its own last index then (the ``floor``): everything committed with the old
   acknowledgements, and everything committed in earlier terms, is at or below it. Until the
   follower holds the floor, responses without the nonce are from its previous life (in flight
   when it died) and are dropped. A leader hands leadership to no recovering node, and makes no
   membership change after which the voters not known to recover would not be a majority.
3. **It ends when the leader says it holds the floor** (a heartbeat carrying its nonce), and not
   before it has run for two election timeouts: a vote the node gave before it lost its disk
   belongs to an election that has ended by then (a candidate gives up a term within one), so it
   cannot give a second vote in a term in which its first one can still count. From then on it
   is an ordinary follower (its vote in the current term set to the leader that told it).

**Not covered yet: a stale leader.** The recovering node has forgotten its term too, so it takes
appends from any leader whose term is above zero, and the leader counts its acknowledgements once
they are real. A leader that was frozen or cut off while the others elected a successor (with the
lost disk's vote) and committed entries, and that comes back while that successor is down, finds
the recovering node its only follower: together they are a majority, and the entries they commit
can conflict with the successor's. Closing it means counting a recovering node in no majority
(commit, read index, check-quorum) and telling it its recovery is over only after a round of
heartbeats that a majority of sound voters answered (as a read index confirms leadership).

A recovering node counts as a failed one in the group's tolerance: a group of three elects only
while two nodes that are not recovering can talk. One node losing its disk loses nothing
acknowledged and keeps the group available (the other two lead and bring it back); more failures
at once than the group tolerates (two of three disks lost, or one lost while another node still
recovers, as a node does for a few seconds after it first joins) can lose entries or leave the
group unable to elect until the recovering nodes are caught up by a leader, which needs a majority
of nodes that are not recovering.
"""

from __future__ import annotations

import random

from cluster.raft.tracker import Progress

__all__ = ["ELECTIONS_TO_WAIT", "heard", "may_vote", "new_recovery", "recovered"]

ELECTIONS_TO_WAIT = 2
"""A recovery lasts at least this many election timeouts (in the node's ticks)."""


def new_recovery(rng: random.Random) -> int:
    """A recovery's nonce: nonzero, random (two recoveries of one node must differ)."""
    return rng.getrandbits(62) | 1


def may_vote(recovering: int, last_index: int, candidate_last_index: int) -> bool:
    """Whether a node (recovering or not, its log ending at ``last_index``) may vote for a
    candidate whose log ends at ``candidate_last_index``, as far as recovery goes (rule 1)."""
    return not recovering or last_index == candidate_last_index == 0


def heard(progress: Progress, recovering: int, last_index: int) -> bool:
    """A leader heard a response carrying ``recovering`` from the follower of ``progress``, while
    its own log ends at ``last_index`` (rule 2). False: drop the response, it is from the
    follower's life before it lost its log."""
    progress.unheard = False
    if recovering:
        if recovering != progress.recovery:
            progress.recovery = recovering
            progress.floor = last_index
            progress.forget(last_index + 1)
        progress.recovering = True
        return True
    if progress.recovering and progress.match < progress.floor:
        return False
    progress.recovering = False
    return True


def recovered(progress: Progress) -> int:
    """The recovery to tell the follower is complete (rule 3), or 0."""
    if progress.recovering and progress.match >= progress.floor:
        return progress.recovery
    return 0
