"""One pubmesh broker process: client connections, accounts, monitoring and the command line."""
