"""The Redis commands, one module per command family, and the table of them all (``table``)."""
