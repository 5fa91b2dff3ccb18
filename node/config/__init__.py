"""A node's configuration: the options (their records and defaults), reading them from TOML or
nats-server's own format, and the checks a whole configuration must pass."""
