"""Redis streams: compact entry storage, ID rules and consumer groups (pure, synchronous, no I/O)."""

from node.data.streams.groups import (
    Consumer,
    ConsumerGroup,
    ConsumerInfo,
    GroupInfo,
    HistoryEntry,
    Nack,
    group_infos,
)
from node.data.streams.ids import (
    MAX_ID,
    StreamError,
    format_id,
    id_ms,
    id_seq,
    make_id,
    parse_add_id,
    parse_bound,
    parse_id,
)
from node.data.streams.stream import Entry, Stream, Trim, check_setid_args

__all__ = [
    "MAX_ID",
    "Consumer",
    "ConsumerGroup",
    "ConsumerInfo",
    "Entry",
    "GroupInfo",
    "HistoryEntry",
    "Nack",
    "Stream",
    "StreamError",
    "Trim",
    "check_setid_args",
    "format_id",
    "group_infos",
    "id_ms",
    "id_seq",
    "make_id",
    "parse_add_id",
    "parse_bound",
    "parse_id",
]
