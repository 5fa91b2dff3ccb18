"""The Redis front door's run-time state that the node holds for all its Redis connections: the
parameters CONFIG SET changes (``settings``) and what is counted as commands run (``stats``)."""
