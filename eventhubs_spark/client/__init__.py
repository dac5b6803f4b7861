"""Connections to Event Hubs: settings and credentials, the cached management client, receiver pool."""
