"""The data pipeline: pubmesh streams as sources and sinks of batch (and later streaming) jobs.

It talks to nodes only over the network, as a Redis client, so it runs wherever a job's executors run
and reads redis-server streams just as well; nothing here imports the broker.
"""
