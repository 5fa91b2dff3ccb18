"""The node as a program: the command line, starting and stopping, assembly, reload, signals, logs,
and ``pubmesh local``."""
