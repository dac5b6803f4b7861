"""A new user's first steps (issue 18): option errors at .load(), short and first; a script run with
the venv's python without activating it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
CONN = "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=hub;UseDevelopmentEmulator=true"


@pytest.mark.parametrize("kind", ["stream", "batch"])
def test_a_misspelt_option_fails_at_load_with_the_message_first(spark, kind):
    reader = spark.readStream if kind == "stream" else spark.read
    with pytest.raises(Exception) as info:
        reader.format("eventhubs").option("eventhubs.connectionString", CONN).option(
            "eventhubs.consumerGrop", "x"
        ).load()
    text = str(info.value)
    assert "did you mean 'eventhubs.consumerGroup'" in text
    assert len(text) < 800, f"short: {len(text)} characters"
    assert "UnboundLocalError" not in text and "SharedAccessKey=b" not in text


def test_an_option_only_a_batch_read_takes_fails_a_stream_with_our_message(spark, tmp_path):
    df = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", CONN)
        .option("eventhubs.endingPosition", '{"offset": "@latest"}')
        .load()
    )
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
    try:
        with pytest.raises(Exception) as info:
            query.awaitTermination(120)
        error = str(info.value)
    finally:
        query.stop()
    assert "eventhubs.endingPosition applies to batch reads, not to streaming reads" in error
    assert "UnboundLocalError" not in error


@pytest.mark.parametrize("imports", [True, False], ids=["import eventhubs_spark", "the ./dev venv alone"])
def test_a_script_run_with_the_venv_python_without_activating_it(tmp_path, eventhub, imports):
    """Spark's Python workers start `python3` from PATH unless told otherwise: importing the connector
    makes them use the interpreter it is installed in, and so does the ./dev venv by itself (the
    README's case: `.venv/bin/python job.py`)."""
    import site

    from tests.integration.sdk_helpers import send

    if not imports:
        pth = Path(site.getsitepackages()[0]) / "eventhubs_spark_checkout.pth"
        assert pth.exists(), f"{pth} is missing: this venv was not set up by ./dev (run ./dev setup)"
    send(eventhub.connection_string, ["hello"], partition_id="0")
    script = tmp_path / "job.py"
    script.write_text(
        ("import eventhubs_spark  # also points Spark's Python workers at this interpreter\n" if imports else "")
        + textwrap.dedent(
            f"""
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
            rows = (spark.read.format("eventhubs")
                    .option("eventhubs.connectionString", {eventhub.connection_string!r}).load().collect())
            print("ROWS", sorted(bytes(r.body).decode() for r in rows))
            spark.stop()
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if Path(sys.executable).parent
                                  != Path(p))  # fmt: skip
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    assert "ROWS ['hello']" in run.stdout, run.stderr[-3000:]
