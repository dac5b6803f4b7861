"""Spark runs the connector: streams, batches, clusters, Spark Connect, notebooks and pipelines."""
