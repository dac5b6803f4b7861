"""The driver's planning: offset ranges and rate limits, positions looked up, partition homes and lag."""
