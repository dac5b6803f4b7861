"""What crosses between a query's processes: ranges, sealed sockets, the driver's channel, service messages."""
