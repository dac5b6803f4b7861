"""Small pure helpers every layer uses: the retry policy and waits on sockets."""
