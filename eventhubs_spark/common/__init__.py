"""Small pure helpers every layer uses.

They are the retry policy, waits on sockets, and the count of changes to what a process's links vouch for.
"""
