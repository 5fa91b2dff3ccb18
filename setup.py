"""Build pubmesh, compiling the modules on its publish path with mypyc.

Every publish runs through the parser, the connection logic, the broker and the routing core; they
are plain, fully typed Python, and mypyc turns them into C extensions that run the same code about
twice as fast. Everything else (the trio adapters, configuration, monitoring) stays interpreted.
Set PUBMESH_PURE_PYTHON=1 to install without compiling (the source runs as it is).
"""

import os

from setuptools import setup

HOT_PATH = [
    "routing/subjects.py",
    "routing/subscription.py",
    "routing/stats.py",
    "routing/trie.py",
    "routing/sublist.py",
    "routing/remote.py",
    "routing/interest.py",
    "routing/forwarding.py",
    "routing/message.py",
    "routing/channels.py",
    "routing/glob.py",
    "routing/patterns.py",
    "transport/outbox.py",
    "transport/readiness.py",
    "transport/sessions.py",
    "cluster/checks.py",
    "cluster/frames.py",
    "cluster/decoder.py",
    "cluster/message_frames.py",
    "cluster/link.py",
    "cluster/peer.py",
    "cluster/replies.py",
    "node/nats/protocol/events.py",
    "node/nats/protocol/errors.py",
    "node/nats/protocol/parser.py",
    "node/accounts/account.py",
    "node/accounts/permissions.py",
    "node/broker.py",
    "node/connection.py",
    "node/nats/client.py",
    "node/integers.py",
    "node/resp/parser.py",
    "node/resp/writer.py",
    "node/resp/dispatch.py",
    "node/resp/tracking.py",
    "node/resp/blocking.py",
    "node/resp/transaction.py",
    "node/resp/connection.py",
    "node/resp/in_order.py",
    "node/resp/monitor_lines.py",
    "node/resp/client_list.py",
    "node/data/notifications.py",
    "node/redis_state/settings.py",
    "node/redis_state/stats.py",
    "node/data/keyspace.py",
    "node/data/keyspaces.py",
    "node/data/streams/ids.py",
    "node/data/streams/entries.py",
    "node/data/streams/stream.py",
    "node/data/streams/groups.py",
    "node/data/stream_writes.py",
    "node/resp/commands/common.py",
    "node/resp/commands/connection.py",
    "node/resp/commands/server.py",
    "node/resp/commands/pubsub.py",
    "node/resp/commands/transactions.py",
    "node/resp/commands/keys.py",
    "node/resp/commands/strings.py",
    "node/resp/commands/string_numbers.py",
    "node/resp/commands/objects.py",
    "node/resp/commands/lcs.py",
    "node/resp/commands/streams.py",
    "node/resp/commands/stream_reads.py",
    "node/resp/commands/stream_groups.py",
    "node/resp/commands/tracking.py",
    "node/resp/commands/scripting.py",
    "node/scripting/records.py",
    "node/scripting/registry.py",
    "node/scripting/engine.py",
]

ext_modules = []
if not os.environ.get("PUBMESH_PURE_PYTHON"):
    from mypyc.build import mypycify

    ext_modules = mypycify(HOT_PATH, opt_level="3")

setup(ext_modules=ext_modules)
