"""A node's configuration: the options, read from TOML or nats-server's own format and the command
line."""
