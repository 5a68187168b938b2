"""Where nodes run: the local launcher (``local.py``, ports in ``ports.py``), the Docker
engine (the only module importing the Docker SDK), provisioners, ring operations.

May import: ``smr.client``, ``smr.spec``, ``smr.output``, ``smr.transport``,
``smr.node.disk``.
"""
