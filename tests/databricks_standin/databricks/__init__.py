"""The tests' stand-in for the part of Databricks' Python runtime the connector uses (never installed, never shipped):
put ``tests/databricks_standin`` on a Spark process's ``PYTHONPATH`` and it has ``databricks.service_credentials``."""
