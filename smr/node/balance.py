"""Neighbour load balance, decided by the nodes themselves (docs/design/architecture.md#moves; the
thesis' section 6.5): a node that stays busy asks its clockwise neighbour to take the top of its
range, and the neighbour accepts only if it is not busy itself. No controller takes part:
if the autoscale controller is down, balance goes on.

The protocol (a move, ``smr.node.moves``, with a load condition):

1. Watch (every tick): the node's utilisation (applied over its cap, else its loop's CPU
   share). It is *hot* once it has stayed at or above ``above`` for ``sustain_s``.
2. Propose: a hot node that owns at least two slots, takes part in no move, and made no
   balancing attempt in the last ``cooldown_s`` starts a move of the top of its range, split
   by its per-slot rates so that about ``keep_share`` of its load stays, with the condition
   ``accept_below`` in the proposal.
3. Answer: the receiver refuses if its own utilisation is at or above ``accept_below`` (a
   neighbour itself loaded takes nothing), else the move runs as any other.
4. Pass on, once: a receiver that refused while at or above ``accept_below`` itself, and
   that can move and made no balancing attempt in the last ``cooldown_s``, starts a
   balancing move of its own to its clockwise neighbour ``PASS_ON_AFTER_S`` later (that
   neighbour is the refused move's copy holder at ``r = 1``, busy with it until the giver
   has called it off), marked *passed on*: that
   neighbour, if busy too, refuses without passing it further (beyond two neighbours, the
   whole ring being busy is the autoscaler's business). A receiver that made room this
   way is less busy when the hot node tries again.
5. Repeat: after ``cooldown_s``, a node still hot tries again, so a hot range walks
   clockwise, a third of its load at a time, until the nodes around it share it.

The decisions are :func:`balance_share` and :func:`pass_on_share`, pure functions, so they
are tested on their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from smr.node.ports import MoveState, SeatFn
from smr.ring.moves import MoveRefused

log = logging.getLogger("smr.node")

# The share of its load a hot node keeps: moving a third leaves room for the neighbour (at
# most ``accept_below`` busy before) and relieves a saturated node by a third at least.
KEEP_SHARE: Final = 2 / 3
SUSTAIN_S: Final = 3.0
COOLDOWN_S: Final = 10.0
# How far under the hot threshold a neighbour must be to accept.
ACCEPT_MARGIN: Final = 0.3
# Step 4: a refusal is passed on this long after it was sent, once the refused move's giver
# has called it off at its copy holder (one message each way, milliseconds apart).
PASS_ON_AFTER_S: Final = 0.2


@dataclass(frozen=True)
class BalanceConfig:
    """When a node balances: hot at ``above`` for ``sustain_s``; a neighbour accepts below
    ``accept_below``; one attempt per ``cooldown_s``; ``keep_share`` of the load stays."""

    above: float
    sustain_s: float = SUSTAIN_S
    cooldown_s: float = COOLDOWN_S
    keep_share: float = KEEP_SHARE

    def __post_init__(self) -> None:
        if not 0 < self.above <= 1:
            raise ValueError(f"the balance threshold is a utilisation in (0, 1], not {self.above}")

    @property
    def accept_below(self) -> float:
        """A receiver accepts a balancing move only while less busy than this."""
        return max(0.05, self.above - ACCEPT_MARGIN)


@dataclass(frozen=True)
class BalanceState:
    """What the decision remembers: since when the node is hot, its last attempt."""

    hot_since_s: float | None = None
    attempted_at_s: float | None = None

    def cooling(self, config: BalanceConfig, now_s: float) -> bool:
        """Whether the last attempt was less than ``cooldown_s`` ago."""
        attempted = self.attempted_at_s
        return attempted is not None and now_s - attempted < config.cooldown_s


def balance_share(
    config: BalanceConfig,
    state: BalanceState,
    now_s: float,
    utilization: float,
    can_move: bool,
) -> tuple[float | None, BalanceState]:
    """Steps 1 and 2: the share of its load a node keeps in a balancing move to start now
    (None: no move), and the new state. ``can_move``: the node owns two slots or more and
    takes part in no move."""
    hot_since = state.hot_since_s
    if utilization < config.above:
        hot_since = None
    elif hot_since is None:
        hot_since = now_s
    state = BalanceState(hot_since, state.attempted_at_s)
    if hot_since is None or now_s - hot_since < config.sustain_s or not can_move:
        return None, state
    if state.cooling(config, now_s):
        return None, state
    return config.keep_share, BalanceState(hot_since, now_s)


def pass_on_share(
    config: BalanceConfig,
    state: BalanceState,
    now_s: float,
    utilization: float,
    can_move: bool,
) -> tuple[float | None, BalanceState]:
    """Step 4, when this node refused a balancing move that was not passed on: the share of
    its load it keeps in a balancing move of its own to start now (None: none), and the new
    state. It passes on only while at or above ``accept_below`` itself, able to move, and
    out of its cooldown (a pass-on counts as an attempt)."""
    if utilization < config.accept_below or not can_move:
        return None, state
    if state.cooling(config, now_s):
        return None, state
    return config.keep_share, BalanceState(state.hot_since_s, now_s)


class Balancer:
    """One node's side of neighbour balance (the module docstring's protocol)."""

    def __init__(
        self,
        seat: SeatFn,
        utilization: Callable[[], float],
        moves: MoveState,
        config: BalanceConfig,
    ) -> None:
        """``utilization``: the node's, 0 to 1 (``NodeCore.utilization``)."""
        self._seat = seat
        self._utilization = utilization
        self._moves = moves
        self.config = config
        self._state = BalanceState()
        # Step 4: when this node refused a balancing move that it is to pass on.
        self._refused_at_s: float | None = None

    def tick(self, now_s: float) -> None:
        """Steps 1, 2 and 4, on the node's tick."""
        utilization, can_move = self._utilization(), self._can_move()
        refused_at = self._refused_at_s
        if refused_at is not None and now_s - refused_at >= PASS_ON_AFTER_S:
            self._refused_at_s = None
            keep, self._state = pass_on_share(
                self.config, self._state, now_s, utilization, can_move
            )
            if keep is not None:
                self._start(keep, True, "asked to take load while busy: passing the request on")
                return
        keep, self._state = balance_share(self.config, self._state, now_s, utilization, can_move)
        if keep is not None:
            self._start(keep, False, f"busy for {self.config.sustain_s:.0f} s")

    def refused(self, now_s: float) -> None:
        """This node refused a balancing move that was not passed on: step 4 follows on a
        tick ``PASS_ON_AFTER_S`` from now."""
        if self._refused_at_s is None:
            self._refused_at_s = now_s

    def _can_move(self) -> bool:
        seat = self._seat()
        own = seat.ring.range_of(seat.node_id)
        return own is not None and own.length >= 2 and not self._moves.busy

    def _start(self, keep: float, passed_on: bool, why: str) -> None:
        try:
            what = self._moves.start(
                keep, accept_below=self.config.accept_below, passed_on=passed_on
            )
        except MoveRefused as refused:
            log.info("no balancing move: %s", refused)
            return
        log.warning("%s: balancing move: %s", why, what)
