"""The mapper side of the data path (docs/design/architecture.md#data-path, steps 2-4): the
emitter (``emitter.py``, the façade a program, a feed or a Spark task uses) and its parts:
routing by the view and holding back the tuples of moving ranges (``router.py``), batching
(``batcher.py``), the numbered channels with their windows and acks (``channels.py``),
resends and giving up (``resend.py``), and telling the nodes a mapper finished
(``finish.py``).

It may import the wire level (``smr.wire``, ``smr.wire.batch_body``, ``smr.wire``),
``smr.transport``, ``smr.values`` and ``smr.api``; never ``smr.client``, ``smr.node``,
``smr.sim`` or the command line (a contract in ``pyproject.toml`` keeps it so).
"""
