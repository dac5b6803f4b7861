"""Where a hub is and how to sign in and reach it, as plain data.

Connection settings (resolved from the options), secrets and Microsoft Entra ID identities, and the network
(transport, proxy, endpoint, CA bundle). Plain, picklable data: every process builds its own clients and
credentials from it.
"""
