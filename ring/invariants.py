"""What must never happen, checked where it would happen.

A violated invariant means the process holds state it can no longer trust; going on would
corrupt quietly, so it stops loudly instead: the node process exits at once (its peers take
over its range as after a crash), and the simulation reports the violation as a failure of
its seed. Checks sit where a later change could break the property, not where the line
before makes it true.
"""


class InvariantViolation(AssertionError):
    """Something that must never happen did; the message says what, with the values."""
