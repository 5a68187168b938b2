"""Distinct types for the identities the ring deals in.

A `NodeId` names a reducer node, a `Slot` is one of the `2**slot_bits` cells of the hash ring,
and a `Token` is the slot where a node sits. Tokens and slots are both ints at run time; the
types exist so that mypy catches a token passed where a slot is meant, and so that signatures
say what they take. An `Incarnation` and an `Epoch` order the entries of a view and the views
themselves (`ring.view`).
"""

from typing import NewType

NodeId = NewType("NodeId", str)
"""A node's stable name (chosen by whoever starts it, e.g. ``"node-3"``)."""

Slot = NewType("Slot", int)
"""A cell of the ring, ``0 <= slot < 2**slot_bits``: the unit of state, dedup and migration."""

Token = NewType("Token", int)
"""The slot number where a node sits; it is primary for the slots from its token up to the next."""

Incarnation = NewType("Incarnation", int)
"""One life of a node, from 1: raised each time it (re)joins with empty state, so that a node
marked dead can come back as a new incarnation while the old one stays fenced."""

Epoch = NewType("Epoch", int)
"""A view's epoch (`ring.view.View.epoch`): grows with every change a merge brings, so two
parties compare views by it."""
