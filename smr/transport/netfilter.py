"""Network faults emulated inside a node process: ``smr fault``'s local backend, and the
Docker backend's delay where the kernel has no netem.

The filter sits on a node's messages to its peers (:class:`FilteredLinks` wraps the node's
links) and holds a message back until a rule lets it go; it never drops one, because the
faults it stands in for do not either: a network cut that resets no connection (iptables
DROP) makes TCP deliver everything late, in order, once it heals, and a lost packet is sent
again by TCP after its retransmission timeout. So:

- ``cut`` peers: a message to them waits until the rule ends (or ``heal``);
- ``delay`` by ``delay_ms`` (plus a uniform ``jitter_ms`` either way): it waits that long;
- ``loss`` of ``loss_ppm`` millionths: that share of messages waits :data:`RETRANSMIT_MS`.

Messages to one peer leave in the order sent (a message never overtakes one held before
it), and every rule ends by itself after its duration, so a fault heals even if whoever
set it is gone. Only messages between nodes are held: replies to mappers and clients pass
(a partition cuts nodes from nodes; the feeders stand outside both groups). Each side holds
its own outbound messages, so a partition or a delay is set on every node it touches: the
CLI (:mod:`smr.faults.backends`) does that.

A rule reaches a node as a ``NET_RULE_REQUEST`` (body: :func:`pack_rule`), answered with a
``NET_RULE`` reply; the node's loop hands it to :meth:`FilteredLinks.on_request` before the
node's core sees it, so the core, and the simulation that runs it, know nothing of this.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from smr.ring.ids import NodeId
from smr.transport.links import NodeLinks
from smr.wire.codec import pack_body, unpack_body

# The shortest TCP retransmission timeout on Linux: a lost segment arrives about this late.
RETRANSMIT_MS: Final = 200
# Held messages per peer; past it a send fails as a full socket queue would.
HELD_MESSAGES_MAX: Final = 20_000
ACTIONS: Final = ("cut", "delay", "loss", "heal")


@dataclass(frozen=True)
class NetRule:
    """One emulated fault on this node's messages to ``peers`` (empty: every peer), until
    ``ends_at`` (monotonic seconds)."""

    action: str
    peers: frozenset[NodeId]
    ends_at: float
    delay_ms: int = 0
    jitter_ms: int = 0
    loss_ppm: int = 0

    def applies(self, peer: NodeId, now: float) -> bool:
        """True while the rule lasts, for a message to ``peer``."""
        return now < self.ends_at and (not self.peers or peer in self.peers)


def pack_rule(
    action: str,
    peers: Sequence[str] = (),
    duration_ms: int = 0,
    delay_ms: int = 0,
    jitter_ms: int = 0,
    loss_ppm: int = 0,
) -> bytes:
    """The body of a rule request (``heal`` takes no other field)."""
    return pack_body(
        {
            "action": action,
            "peers": list(peers),
            "duration_ms": duration_ms,
            "delay_ms": delay_ms,
            "jitter_ms": jitter_ms,
            "loss_ppm": loss_ppm,
        }
    )


def parse_rule(body: bytes, now: float) -> NetRule | None:
    """The rule a request's body asks for, starting ``now``; None for ``heal``. ValueError,
    saying what is wrong, for anything else."""
    try:
        raw = unpack_body(body)
    except Exception as error:
        raise ValueError(f"a rule body must be a msgpack map: {error}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"a rule body must be a map, got {type(raw).__name__}")
    action = raw.get("action")
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    if action == "heal":
        return None
    peers = raw.get("peers", [])
    if not isinstance(peers, list | tuple) or not all(isinstance(p, str) for p in peers):
        raise ValueError(f"peers must be a list of node ids, got {peers!r}")
    numbers = {key: _count(raw, key) for key in ("duration_ms", "delay_ms", "jitter_ms")}
    loss_ppm = _count(raw, "loss_ppm")
    if numbers["duration_ms"] <= 0:
        raise ValueError("a rule needs a duration_ms > 0: every fault heals by itself")
    if loss_ppm > 1_000_000:
        raise ValueError(f"loss_ppm is at most 1000000, got {loss_ppm}")
    if action == "delay" and numbers["delay_ms"] <= 0:
        raise ValueError("a delay needs delay_ms > 0")
    if action == "loss" and loss_ppm <= 0:
        raise ValueError("a loss needs loss_ppm > 0")
    return NetRule(
        action,
        frozenset(NodeId(p) for p in peers),
        now + numbers["duration_ms"] / 1000,
        numbers["delay_ms"],
        numbers["jitter_ms"],
        loss_ppm,
    )


def _count(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key} must be an int >= 0, got {value!r}")
    return value


def release_at(
    rules: Sequence[NetRule], peer: NodeId, now: float, draw: Callable[[], float]
) -> float:
    """When a message sent to ``peer`` at ``now`` may leave (``now``: at once), by the rules
    that apply to it: the latest of what each asks. ``draw()`` is uniform in [0, 1)."""
    leave = now
    for rule in rules:
        if not rule.applies(peer, now):
            continue
        if rule.action == "cut":
            leave = max(leave, rule.ends_at)
        elif rule.action == "delay":
            jitter_ms = (2 * draw() - 1) * rule.jitter_ms
            leave = max(leave, now + max(0.0, rule.delay_ms + jitter_ms) / 1000)
        elif draw() * 1_000_000 < rule.loss_ppm:
            leave = max(leave, now + RETRANSMIT_MS / 1000)
    return leave


@dataclass
class _Held:
    leave_at: float
    addr: str
    frames: Sequence[bytes]


class FilteredLinks:
    """A node's links with the emulated faults on its messages to peers (see the module).

    Guarantees: with no rule set, a send is the inner link's send; a held message leaves in
    order after every message to that peer held before it, by :meth:`release_due`, once
    its time comes; at most :data:`HELD_MESSAGES_MAX` wait per peer (a send past it fails).
    """

    def __init__(
        self,
        inner: NodeLinks,
        clock: Callable[[], float] = time.monotonic,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._inner = inner
        self._clock = clock
        self._draw = draw
        # Replaced whole, never changed in place: the heartbeat thread reads it too.
        self.rules: tuple[NetRule, ...] = ()
        self._held: dict[NodeId, deque[_Held]] = {}

    # -- the links interface -------------------------------------------------------------------

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        """Replies pass: they go to mappers and clients, outside every rule."""
        return self._inner.reply(identity, frames)

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        """Send to peer ``node`` now, or hold the message until the rules let it go."""
        held = self._held.get(node)
        if not self.rules and not held:
            return self._inner.send(node, addr, frames)
        now = self._clock()
        leave_at = release_at(self.rules, node, now, self._draw)
        if held:
            leave_at = max(leave_at, held[-1].leave_at)
        elif leave_at <= now:
            return self._inner.send(node, addr, frames)
        queue = self._held.setdefault(node, deque())
        if len(queue) >= HELD_MESSAGES_MAX:
            return False
        queue.append(_Held(leave_at, addr, frames))
        return True

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        """As the inner links say."""
        return self._inner.dropped(peers)

    # -- the filter ------------------------------------------------------------------------------

    def apply(self, rule: NetRule | None) -> str:
        """Add ``rule``, or heal (None): drop every rule and let every held message go."""
        now = self._clock()
        if rule is None:
            self.rules = ()
            for queue in self._held.values():
                for message in queue:
                    message.leave_at = now
            self.release_due()
            return "healed: no rule left"
        self.rules = (*(r for r in self.rules if r.ends_at > now), rule)
        peers = ", ".join(sorted(rule.peers)) or "every peer"
        return f"{rule.action} to {peers} for {rule.ends_at - now:.3f} s"

    def cut_off(self, peer: NodeId) -> bool:
        """True while a rule holds every message to ``peer`` (safe from another thread)."""
        now = self._clock()
        return any(r.action == "cut" and r.applies(peer, now) for r in self.rules)

    def release_due(self) -> float | None:
        """Send every held message whose time came; seconds until the next one is due (None:
        nothing held). A message the inner link refuses (its queue full) stays first."""
        now = self._clock()
        if self.rules and all(r.ends_at <= now for r in self.rules):
            self.rules = ()
        next_at: float | None = None
        for node, queue in self._held.items():
            while queue and queue[0].leave_at <= now:
                message = queue[0]
                if not self._inner.send(node, message.addr, message.frames):
                    break
                queue.popleft()
            if queue:
                due = max(queue[0].leave_at, now + 0.001)
                next_at = due if next_at is None else min(next_at, due)
        return None if next_at is None else next_at - now

    @property
    def held(self) -> int:
        """Messages held now, over every peer."""
        return sum(len(queue) for queue in self._held.values())
