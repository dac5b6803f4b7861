"""A JSON read through a Spark Connect client, for the test that checks JSON bodies on Connect.

``python -m tests.integration.connect_json_app CONNECTION_STRING OUT_DIR`` reads the hub from its start with
``eventhubs.json.schemaLocation`` (``OUT_DIR/schema``) and writes ``OUT_DIR/result.json``: the value column's type
and the rows' ids and rescued texts.
"""

from __future__ import annotations

import json
import os
import sys


def main(connection: str, out: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import eventhubs_spark
    from tests.integration.spark_app import connect_session

    spark = connect_session()
    assert spark.__module__ == "pyspark.sql.connect.session", spark
    eventhubs_spark.register(spark)
    df = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", connection)
        .option("eventhubs.json.schemaLocation", os.path.join(out, "schema"))
        .load()
    )
    rows = df.selectExpr("value.id as id", "_rescued_data as rescued").collect()
    result = {"value": df.schema["value"].dataType.simpleString(),
              "rows": sorted([[r.id, r.rescued] for r in rows], key=lambda x: (x[0] is None, x[0] or 0))}  # fmt: skip
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
