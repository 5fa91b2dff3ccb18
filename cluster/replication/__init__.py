"""Replica groups: the Raft core (``cluster.raft``) run over route links and a real disk.

``storage`` keeps a group's Raft state durable, ``wire`` lays its messages out on routes, ``group``
drives one group, and ``replicas`` holds a node's groups and connects them to its routes. This
package's ``__init__`` imports nothing, so the frame codec may import ``wire`` without a circle.
"""
