"""The layer every front door, link and store rides on: outbound queues, sessions over trio streams,
the containment boundary that keeps one connection's failure its own, and the checksummed record
framing both durable files use (the Redis journal and the replica groups' logs).

It imports nothing of pubmesh but ``routing``; ``node`` (client connections) and ``cluster`` (routes
and gateways) both build on it, and neither reaches into the other's internals.
"""
