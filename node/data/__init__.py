"""What a node keeps: the keyspace, streams and consumer groups, the journal that makes them durable,
and the streams that capture subjects."""
