"""Unit tests of :mod:`eventhubs_spark.cli.demo`."""

from __future__ import annotations


def test_the_demo_leaves_out_only_sparks_closed_socket_tracebacks_the_daemons_at_any_time() -> None:
    import threading

    from eventhubs_spark.cli.demo import ShutdownNoise

    spark_noise = (
        "Traceback (most recent call last):\n"
        '  File "pyspark/daemon.py", line 264, in manager\n'
        "EOFError\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "pyspark/daemon.py", line 95, in worker\n'
        "BrokenPipeError: [Errno 32] Broken pipe\n"
    )
    real = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: a real failure\n'
    stopping = threading.Event()

    def through(text: str) -> str:
        noise = ShutdownNoise(stopping)
        out = b"".join(noise.feed(line.encode()) for line in text.splitlines(keepends=True))
        return (out + noise.flush()).decode()

    worker_noise = 'Traceback (most recent call last):\n  File "pyspark/worker.py", line 9, in main\nEOFError\n'
    running = "a line\n" + spark_noise + worker_noise + real + "the end\n"
    # while the demo runs: the daemon's closed sockets are left out (a healthy run printed three), the rest passed on
    assert through(running) == "a line\n" + worker_noise + real + "the end\n"
    stopping.set()
    assert through(running) == "a line\n" + real + "the end\n"
    cut_short = 'Traceback (most recent call last):\n  File "pyspark/daemon.py", line 1\n'
    assert through(cut_short) == cut_short, "a traceback the stream ends in is passed on"
