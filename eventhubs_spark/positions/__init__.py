"""Where a stream is, as plain data: positions in a partition, geo-replication segments, the partition catalog."""
