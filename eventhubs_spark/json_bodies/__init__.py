"""JSON bodies into columns.

The parts: the types (:mod:`.types`), the decoder with its rescue column and evolution
(:mod:`.decode`), Spark's text of a value in a string field (:mod:`.spark_text`), and the schema's versions kept where
the user says (:mod:`.kept`).
"""
