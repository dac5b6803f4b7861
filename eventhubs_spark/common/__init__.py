"""Small pure helpers every layer uses.

Small pure helpers every layer uses: the retry policy, waits on sockets, and the count of changes to what a
process's links vouch for.
"""
