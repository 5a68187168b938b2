"""Hypothesis strategies for the ring tests: placed views and colliding membership entries."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from smr.ring.hashing import slot_count
from smr.ring.ids import NodeId, Token
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View

# Members placement ignores (a joining member is an extra secondary: tests of its own).
NON_OWNING_STATUSES = (Status.DEAD, Status.STANDBY)


@dataclass(frozen=True)
class Placed:
    """A view with distinct owner tokens on a ring of `slot_bits` bits."""

    view: View
    slot_bits: int

    @property
    def slot_count(self) -> int:
        return slot_count(self.slot_bits)

    @property
    def owners(self) -> list[Member]:
        """Owners in ring order, computed independently of View.owners."""
        live = [m for m in self.view.members.values() if m.status in (Status.UP, Status.LEAVING)]
        return sorted(live, key=lambda m: (m.token, m.node_id))

    def ring(self) -> Ring:
        return Ring(self.view, self.slot_bits)


def member(
    node_id: str,
    token: int,
    status: Status = Status.UP,
    *,
    incarnation: int = 1,
    version: int = 1,
) -> Member:
    """A member with plausible addr and zone, for examples."""
    return Member(
        node_id=NodeId(node_id),
        incarnation=incarnation,
        addr=f"tcp://{node_id}:7000",
        token=Token(token),
        zone="zone-a",
        status=status,
        version=version,
    )


@st.composite
def placed_views(
    draw: st.DrawFn,
    *,
    min_owners: int = 1,
    max_owners: int = 40,
    min_slot_bits: int = 4,
    max_slot_bits: int = 16,
) -> Placed:
    """Views of `min_owners`..`max_owners` owners (up or leaving) at distinct random tokens,
    with node ids in an order unrelated to token order, plus a few non-owning bystanders
    (joining, dead, standby) at random tokens that placement must ignore."""
    slot_bits = draw(st.integers(min_slot_bits, max_slot_bits))
    count = slot_count(slot_bits)
    n = draw(st.integers(min_owners, min(max_owners, count)))
    tokens = draw(st.lists(st.integers(0, count - 1), min_size=n, max_size=n, unique=True))
    labels = draw(st.permutations(range(n)))
    members = [
        Member(
            node_id=NodeId(f"node-{label:02d}"),
            incarnation=draw(st.integers(0, 3)),
            addr=f"tcp://10.0.0.{label}:7000",
            token=Token(token),
            zone=f"zone-{label % 3}",
            status=draw(st.sampled_from([Status.UP, Status.UP, Status.LEAVING])),
            version=draw(st.integers(0, 5)),
        )
        for label, token in zip(labels, tokens, strict=True)
    ]
    bystanders = draw(st.integers(0, 3))
    for index in range(bystanders):
        members.append(
            Member(
                node_id=NodeId(f"idle-{index}"),
                incarnation=0,
                addr=f"tcp://10.0.1.{index}:7000",
                token=Token(draw(st.integers(0, count - 1))),
                zone="zone-x",
                status=draw(st.sampled_from(NON_OWNING_STATUSES)),
                version=0,
            )
        )
    return Placed(View(members), slot_bits)


def colliding_members() -> st.SearchStrategy[Member]:
    """Members drawn from tiny domains, so that entries for one node id collide on
    incarnation, version and status, and differ in the tie-break fields."""
    return st.builds(
        Member,
        node_id=st.sampled_from([NodeId("a"), NodeId("b"), NodeId("c")]),
        incarnation=st.integers(0, 2),
        addr=st.sampled_from(["tcp://x:1", "tcp://y:1"]),
        token=st.integers(0, 3).map(Token),
        zone=st.sampled_from(["z1", "z2"]),
        status=st.sampled_from(list(Status)),
        version=st.integers(0, 3),
    )


def colliding_views() -> st.SearchStrategy[View]:
    return st.lists(colliding_members(), max_size=6).map(View)


def any_members() -> st.SearchStrategy[Member]:
    """Members over the whole valid domain of every field."""
    return st.builds(
        Member,
        node_id=st.text(min_size=1, max_size=20).map(NodeId),
        incarnation=st.integers(0, 2**32 - 1),
        addr=st.text(max_size=30),
        token=st.integers(0, 2**20 - 1).map(Token),
        zone=st.text(max_size=10),
        status=st.sampled_from(list(Status)),
        version=st.integers(0, 2**32 - 1),
    )


def sample_slots(placed: Placed, extra: list[int]) -> list[int]:
    """The slots where placement bugs hide (each token, its neighbours, both ends of the
    ring) plus `extra`, all reduced onto the ring."""
    count = placed.slot_count
    slots = {0, count - 1}
    for owner in placed.view.members.values():
        slots.update({owner.token % count, (owner.token - 1) % count, (owner.token + 1) % count})
    slots.update(slot % count for slot in extra)
    return sorted(slots)


def primaries(ring: Ring) -> list[NodeId]:
    """The primary of every slot, as a list indexed by slot."""
    return [ring.owners[index] for index in ring.primary_index_by_slot]
