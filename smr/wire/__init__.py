"""The wire protocol: message records (to and from nodes, between nodes, reads), the
codec (every decode validated, ``FrameError``), the columnar batch body, the version,
kinds, id types and the frame cap.

May import: nothing of ``smr`` but ``smr.native`` (the compiled hot path), ``smr.ring``
and ``smr.checkpoint``.
"""
