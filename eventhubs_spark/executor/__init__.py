"""What lives per executor: partition receivers, their pool, the receiver service, and the sink's producers.

A task reads through its executor's receiver service (:mod:`~eventhubs_spark.executor.receiver_service`, reached by
:mod:`~eventhubs_spark.executor.service_client`), which keeps the receivers
(:mod:`~eventhubs_spark.executor.receiver_pool`) across Spark's rotation of Python workers and serves other
executors' tasks as their partitions' home (:mod:`~eventhubs_spark.executor.home_listener`).
"""
