"""What lives per executor: the pool of partition receivers and their range reads (:mod:`.receiver`),
the receiver service every Python worker of an executor reads through (:mod:`.service`), and what
crosses its socket (:mod:`.protocol`, data only).
"""
