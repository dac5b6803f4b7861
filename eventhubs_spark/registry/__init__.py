"""The namespace's Schema Registry: the client the Avro and JSON Schema reads and writes share (:mod:`.client`)."""
