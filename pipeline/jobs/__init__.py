"""Spark jobs over pubmesh streams, each runnable with spark-submit or from Python."""
