"""The Redis commands, one module per command family."""
