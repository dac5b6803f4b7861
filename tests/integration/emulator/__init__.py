"""The emulator's contract: the official SDKs against it, the service's rules and limits it enforces."""
