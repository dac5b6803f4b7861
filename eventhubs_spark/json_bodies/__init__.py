"""JSON bodies into columns: the types (:mod:`.types`), the decoder with its rescue column and evolution
(:mod:`.decode`), and the schema's versions kept where the user says (:mod:`.kept`)."""
