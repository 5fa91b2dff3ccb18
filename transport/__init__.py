"""The connection layer every front door and link rides on: outbound queues, sessions over trio
streams, and the containment boundary that keeps one connection's failure its own.

It imports nothing of pubmesh but ``routing``; ``node`` (client connections) and ``cluster`` (routes
and gateways) both build on it, and neither reaches into the other's internals.
"""
