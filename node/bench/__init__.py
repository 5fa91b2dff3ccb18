"""``pubmesh bench``: a load generator for NATS and Redis-protocol (RESP) servers, and side-by-side
runs against nats-server and redis-server.

The server under test is the thing being measured, so the load generator must never be what limits
the numbers: publishers and subscribers run in processes of their own on blocking sockets, publishers
send pre-built batches of ``PUB`` lines (``PUBLISH`` commands), and subscribers count deliveries by
scanning for tokens rather than parsing messages. ``node.bench.scenarios.run`` is the Python entry point.
"""
