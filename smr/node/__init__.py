"""The reducer node: one process that owns a range of slots and keeps their state.

:class:`~smr.node.core.NodeCore` is the node's logic with no I/O, split by role into the
modules of this package; :func:`~smr.node.loop.serve` is the process around it. Each name is
imported from its module: the package itself imports nothing, so importing one of its modules
(``smr.node.disk``, ``smr.node.settings``) loads no other.
"""
