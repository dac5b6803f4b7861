"""Events as columns: a range's messages decoded column by column into Arrow (:mod:`.layout`), the
message-by-message decoder for what a layout does not describe (:mod:`.message`), the containers and
the SDK-equivalent mapping they agree with (:mod:`.columns`), and the sink's encoder (:mod:`.encode`).
"""
