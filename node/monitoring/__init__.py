"""What a node tells its operators: the HTTP endpoints in nats-server's shapes, Prometheus metrics,
and the system account's requests and advisories."""
