"""Unit tests of :mod:`eventhubs_spark.local_spark`."""

from __future__ import annotations


def test_the_recommended_spark_settings_in_conf_are_the_ones_the_tests_and_demo_run_with():
    from pathlib import Path

    from eventhubs_spark.local_spark import spark_defaults

    recommended = spark_defaults(Path(__file__).resolve().parents[2] / "conf" / "spark-defaults.example.conf")
    assert recommended == {"spark.python.unix.domain.socket.enabled": "true"}
    assert recommended.items() <= spark_defaults().items()
