"""What crosses between a query's processes: task ranges, the sealed socket, the driver's channel, and the
receiver service's framing and messages."""
