"""The connector's parts without Spark, against the emulator and Azurite: receivers, homes, networks, the sink."""
