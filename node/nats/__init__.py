"""The NATS front door: one client connection's protocol logic, its sans-I/O codec, and the URLs a
node advertises to its clients."""
