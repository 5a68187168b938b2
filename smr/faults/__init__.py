"""Faults as data and carrying them out. ``model``, ``tolerance``, ``commands``,
``draws`` and ``scenarios`` are plain data (they import only one another);
``backends``, ``docker`` and ``chaos`` carry faults out on real nodes.

May import: the data modules, one another; the rest, ``smr.cluster``, ``smr.client``,
``smr.spec``, ``smr.transport``.
"""
