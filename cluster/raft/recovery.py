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
   exception is a group's first election, in which every node starts on an empty store: a
   recovering node with an empty log may campaign, saying it recovers, and only voters recovering
   too, from an empty log, vote for it (nodes not recovering refuse it, and it refuses them: a node
   that is not recovering may have an empty log only because it missed what the others committed).
   A majority of recovering nodes is more failures than the group tolerates unless nothing was
   ever committed, so that vote, or winning, ends its recovery.
2. **It says so to the leader**: its append and heartbeat responses carry its nonce. A leader
   that hears a nonce it has not seen for that follower forgets what the follower acknowledged
   before (its ``match``: the old acknowledgements were the lost disk's) and probes its log afresh,
   and takes note of its own last index then (the ``floor``): everything committed with the old
   acknowledgements, and everything committed in earlier terms, is at or below it. Until the
   follower holds the floor, responses without the nonce are from its previous life (in flight
   when it died) and are dropped, unless they say that very recovery is over: a leader may hear
   the nonce late (an answer delayed, or held while it was paused) after another leader ended the
   recovery, and the follower's answers say which recovery ended last (persisted with its hard
   state), so this one does not wait for good for a nonce it will never hear again. A leader
   hands leadership to no recovering node, and makes no membership change after which the
   voters it has heard from lately and not known to recover would not be a majority.
3. **It counts in no majority.** The leader counts neither its acknowledgements (for a commit)
   nor its answers (to a round of heartbeats confirming leadership, as a read index needs, or to
   check-quorum). The node has forgotten its term too, so it follows any leader whose term is
   above zero, a stale one included: a leader frozen or cut off while the others elected a
   successor (with the lost disk's vote) and committed entries, back while that successor is down,
   finds the recovering node its only follower; counted, the two would commit entries that
   conflict with the successor's.
4. **It ends when the leader says it holds the floor** (a heartbeat carrying its nonce), which the
   leader says only once a round of heartbeats it started after the follower held the floor was
   answered by a majority of the voters not recovering: the leader was still the leader then, so
   no later term committed anything it lacks (that term's majority and this one share a sound
   voter, which would have refused the round). And not before the node has run for two election
   timeouts: a vote it gave before it lost its disk belongs to an election that has ended by then
   (a candidate gives up a term within one), so it cannot give a second vote in a term in which
   its first one can still count. From then on it is an ordinary follower (its vote in the
   current term set to the leader that told it).

**What is left to timing.** The node cannot know the terms it voted in before: a candidate that won
a later term with its vote and was then cut off (so that no one the leader heard from knows that
term) leaves a term in which the node, once recovered, may vote a second time, if another node
ever campaigns in it. The winner of that term steps down within an election timeout (check-quorum),
long before another node can reach its term, so two leaders of one term never coexist; but their
entries of that term could share an index. Closing this for good means a new identity per
recovery, the old one removed and the new one added by membership changes (as etcd asks of an
operator replacing a member).

A recovering node counts as a failed one in the group's tolerance: a group of three elects and
commits only while two nodes that are not recovering can talk. One node losing its disk loses nothing
acknowledged and keeps the group available (the other two lead and bring it back); more failures
at once than the group tolerates (two of three disks lost, or one lost while another node still
recovers, as a node does for a few seconds after it first joins) can lose entries or leave the
group unable to elect until the recovering nodes are caught up by a leader, which needs a majority
of nodes that are not recovering.
"""

from __future__ import annotations

import random

from cluster.raft.messages import VoteRequest
from cluster.raft.tracker import Progress

__all__ = ["ELECTIONS_TO_WAIT", "awaits_confirmation", "heard", "may_vote", "new_recovery", "recovered"]

ELECTIONS_TO_WAIT = 2
"""A recovery lasts at least this many election timeouts (in the node's ticks)."""


def new_recovery(rng: random.Random) -> int:
    """A recovery's nonce: nonzero, random (two recoveries of one node must differ)."""
    return rng.getrandbits(62) | 1


def may_vote(recovering: int, last_index: int, request: VoteRequest) -> bool:
    """Whether a node (recovering or not, its log ending at ``last_index``) may grant ``request``,
    as far as recovery goes (rule 1)."""
    if not recovering:
        return not request.recovering
    return bool(request.recovering) and last_index == request.last_index == 0


def heard(progress: Progress, recovering: int, recovered: int, last_index: int) -> bool:
    """A leader heard a response carrying ``recovering`` and ``recovered`` from the follower of
    ``progress``, while its own log ends at ``last_index`` (rule 2). False: drop the response, it
    is from the follower's life before it lost its log."""
    progress.unheard = False
    if recovering:
        if recovering != progress.recovery:
            progress.recovery = recovering
            progress.floor = last_index
            progress.confirm_round = 0
            progress.forget(last_index + 1)
        progress.recovering = True
        return True
    if progress.recovering and progress.match < progress.floor and recovered != progress.recovery:
        return False
    progress.recovering = False
    return True


def awaits_confirmation(progress: Progress) -> bool:
    """Whether the recovering follower of ``progress`` holds the floor and the round of heartbeats
    that lets the leader say so is still to start (rule 4)."""
    return progress.recovering and progress.match >= progress.floor and not progress.confirm_round


def recovered(progress: Progress, confirmed: int) -> int:
    """The recovery to tell the follower is complete (rule 4), or 0; ``confirmed`` is the last
    round of heartbeats a majority of the voters not recovering answered."""
    if progress.recovering and progress.confirm_round and confirmed >= progress.confirm_round:
        return progress.recovery
    return 0
