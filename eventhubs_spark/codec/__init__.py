"""Events as Arrow columns: the source's schema, received messages decoded, and the sink's events encoded.

:mod:`~eventhubs_spark.codec.schema` is the schema every read yields; :mod:`~eventhubs_spark.codec.layout` decodes a
chunk of messages column by column, :mod:`~eventhubs_spark.codec.message` one message at a time where no layout
fits, into the containers of :mod:`~eventhubs_spark.codec.columns`; :mod:`~eventhubs_spark.codec.encode` makes the
sink's AMQP bytes.
"""
