"""``smr feed``: reading records and emitting them (``records.py``), the resumable run
around it (``run.py``), the check that an input is text (``text_check.py``).

May import: ``smr.connection``, ``smr.mapper``, ``smr.client``, ``smr.api``,
``smr.values``.
"""
