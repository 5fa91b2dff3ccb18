"""pubmesh's routing core: subject tries, remote interest, interest tracking, forwarding rules, globs.

Pure, synchronous and free of I/O, so every rule here can be tested exhaustively in isolation; the
node and cluster packages wire it to sockets.
"""

from routing.channels import channel_subject, pattern_subject, subject_channel, subject_pattern
from routing.forwarding import DeliveryPlan, plan_delivery
from routing.glob import GlobPattern, glob_match, is_literal, literal_prefix
from routing.interest import InterestChange, InterestTracker
from routing.message import Message, Origin, Publication
from routing.patterns import PatternIndex
from routing.remote import EMPTY_MATCH, RemoteEntry, RemoteInterest, RemoteMatch
from routing.stats import SubListStats
from routing.subjects import (
    REPLY_PREFIX,
    InvalidSubjectError,
    is_valid_literal_subject,
    is_valid_subject,
    subject_is_literal,
    subject_matches,
    subjects_collide,
    tokenize,
)
from routing.sublist import SubList, SubListResult
from routing.subscription import NOBODY, PatternSubscriber, Subscriber, Subscription

__all__ = [
    "EMPTY_MATCH",
    "NOBODY",
    "REPLY_PREFIX",
    "DeliveryPlan",
    "GlobPattern",
    "InterestChange",
    "InterestTracker",
    "InvalidSubjectError",
    "Message",
    "Origin",
    "PatternIndex",
    "PatternSubscriber",
    "Publication",
    "RemoteEntry",
    "RemoteInterest",
    "RemoteMatch",
    "SubList",
    "SubListResult",
    "SubListStats",
    "Subscriber",
    "Subscription",
    "channel_subject",
    "glob_match",
    "is_literal",
    "is_valid_literal_subject",
    "is_valid_subject",
    "literal_prefix",
    "pattern_subject",
    "plan_delivery",
    "subject_channel",
    "subject_is_literal",
    "subject_matches",
    "subject_pattern",
    "subjects_collide",
    "tokenize",
]
