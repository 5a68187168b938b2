"""The transports: the interfaces the node and the emitter reach other processes through
(:mod:`smr.transport.links`), their ZeroMQ implementation (:mod:`smr.transport.zeromq`, the
only module of smr that imports ``zmq``), the keys (:mod:`smr.transport.security`) and the
node's network filter (:mod:`smr.transport.netfilter`).

May import: ``smr.wire``.
"""
