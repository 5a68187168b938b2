"""Asking the nodes: the control client (every node asked at once), seeds,
subscriptions to output, a mapper id's stream history, status collection.

May import: ``smr.wire``, ``smr.transport``, ``smr.output``, ``smr.spec``.
"""
