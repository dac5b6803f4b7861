"""Event Hubs over AMQP: the SDK seam, the receiving connections, the frame reader, management, failures.

:mod:`~eventhubs_spark.amqp.sdk` is the one place the SDK's private internals are used;
:mod:`~eventhubs_spark.amqp.receive_connections` keeps one connection per namespace and credential, read by
:mod:`~eventhubs_spark.amqp.frame_reader`, which keeps each message as
:mod:`~eventhubs_spark.amqp.messages` describes; :mod:`~eventhubs_spark.amqp.management` asks partition properties;
:mod:`~eventhubs_spark.amqp.failures` and :mod:`~eventhubs_spark.amqp.network_errors` say what a failure means.
"""
