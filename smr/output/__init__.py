"""Reducer output: the records named by origin (``records.py``), the file sink and its
readers by offset (``files.py``), the PostgreSQL table sink (``table.py``).

May import: ``smr.values``, ``smr.wire``.
"""
