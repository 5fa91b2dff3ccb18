"""The Redis keyspace on replica groups: each group's keys as a Raft state machine (``machine``),
the journal that captures a command's changes (``capture``) and the command path that proposes
them to the group holding the command's keys (``path``)."""
