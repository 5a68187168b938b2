"""The cluster spec (``cluster.json``): the records (:mod:`smr.spec.model`) and reading and
writing them (:mod:`smr.spec.parse`); each name is imported from its module, the package
itself imports nothing. Nodes, clients and launchers all read it, so it sits below all three
(docs/design/architecture.md#deployment).

May import: ``smr.api``, ``smr.output`` (the table target).
"""
