"""Raft consensus for replica groups, sans I/O: see ``cluster.raft.core``."""

from cluster.raft.config import RaftConfig
from cluster.raft.core import Raft
from cluster.raft.errors import (
    ChangePending,
    CompactionError,
    InvalidChange,
    LeadershipTransferring,
    NotLeader,
    RaftError,
    Refusal,
    UnknownPeer,
    VotersRecovering,
)
from cluster.raft.membership import AddVoter, ChangeEntry, ConfigChange, RemoveVoter
from cluster.raft.messages import Entry, EntryKind, Message, Snapshot
from cluster.raft.ready import HardState, Persist, Persisted, ReadState, Ready, Role, SoftState

__all__ = [
    "AddVoter",
    "ChangeEntry",
    "ChangePending",
    "CompactionError",
    "ConfigChange",
    "Entry",
    "EntryKind",
    "HardState",
    "InvalidChange",
    "LeadershipTransferring",
    "Message",
    "NotLeader",
    "Persist",
    "Persisted",
    "Raft",
    "RaftConfig",
    "RaftError",
    "ReadState",
    "Ready",
    "Refusal",
    "RemoveVoter",
    "Role",
    "Snapshot",
    "SoftState",
    "UnknownPeer",
    "VotersRecovering",
]
