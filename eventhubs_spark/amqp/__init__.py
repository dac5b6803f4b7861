"""The AMQP side of the connector: the one seam over the SDK's private internals (:mod:`.sdk`), a
message as the frame reader keeps it (:mod:`.messages`), the frame reader itself (:mod:`.tap`, with
:mod:`.websocket`), one connection per namespace and credential read by one thread (:mod:`.engine`),
and the kept-open management link (:mod:`.management`).
"""
