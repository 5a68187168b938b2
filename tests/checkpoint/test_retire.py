"""Retiring finished mappers in the stores (``StateStore.retire``): the hwms go, the retirement
travels with checkpoints and snapshots, a replica counts the mapper's backed-up batches as
covered, and a promotion never applies a retired mapper's tuple twice nor skips one a copy
still needs."""

from __future__ import annotations

from smr.checkpoint.backup import TupleBackup
from smr.checkpoint.delta import Delta, decode_delta, encode_delta
from smr.checkpoint.ids import MapperId, Seq
from smr.checkpoint.promote import PrimaryCopy, promote
from smr.checkpoint.replica import PeerReplica
from smr.checkpoint.store import StateStore
from smr.ring.ids import Slot
from tests.checkpoint.replication import M1, M2, count_words, make_batch, state_of
from tests.checkpoint.test_promote import decode, replica_of

S0, S1, S2 = Slot(0), Slot(1), Slot(2)


def fed_store() -> StateStore:
    """M1 wrote to slots 0 and 1 (seqs 1 to 3), M2 to slot 1 (seq 1)."""
    store = StateStore()
    store.apply_batch(M1, [0, 1, 1], [1, 2, 3], ["a", "b", "b"], [1, 1, 1], count_words)
    store.apply_batch(M2, [1], [1], ["b"], [1], count_words)
    return store


def test_retire_drops_the_mappers_hwms_and_keeps_its_last_seq() -> None:
    store = fed_store()
    assert store.hwm_entries() == 3
    store.retire(M1, Seq(3))
    assert store.hwm_entries() == 1
    assert dict(store.hwms_of(M1)) == {}
    assert store.hwm(M2, S1) == 1
    assert dict(store.retired) == {M1: 3}
    assert state_of(store, [S0, S1])[0] == {(S0, "a"): {"count": 1}, (S1, "b"): {"count": 3}}


def test_a_hwm_past_the_last_seq_is_kept_rather_than_guessed() -> None:
    store = fed_store()
    store.retire(M1, Seq(2))
    assert dict(store.hwms_of(M1)) == {S1: 3}


def test_a_checkpoint_carries_new_retirements_once_and_the_replica_drops_their_hwms() -> None:
    primary = fed_store()
    replica = PeerReplica()
    replica.begin_snapshot(as_of=0)
    replica.end_snapshot()
    replica.apply_checkpoint(1, primary.swap())
    primary.merge_inactive()
    assert replica.store.hwm_entries() == 3
    primary.retire(M1, Seq(3))
    delta = primary.swap()
    primary.merge_inactive()
    assert delta.retired == {M1: 3}
    replica.apply_checkpoint(2, decode_delta(encode_delta(delta)))
    assert replica.store.hwm_entries() == 1
    assert dict(replica.store.retired) == {M1: 3}
    assert primary.swap().retired == {}


def test_a_snapshot_carries_every_retirement() -> None:
    primary = fed_store()
    primary.retire(M1, Seq(3))
    primary.swap()
    primary.merge_inactive()
    copy = replica_of(primary.snapshot([S2]))
    assert dict(copy.store.retired) == {M1: 3}
    assert copy.hwm(M1, S2) == 3


def test_a_replica_counts_a_retired_mappers_batches_as_covered() -> None:
    replica = replica_of(Delta(states={}, hwms={}))
    backup = TupleBackup()
    assert backup.add(make_batch(M1, [(0, 5, "a", 1), (1, 6, "b", 1)]), replica.hwm)
    assert backup.add(make_batch(M2, [(0, 2, "a", 1)]), replica.hwm)
    # The primary applied both and checkpointed them, then retired M1.
    replica.apply_checkpoint(
        1,
        Delta(
            states={S0: {"a": {"count": 2}}, S1: {"b": {"count": 1}}},
            hwms={S0: {M1: Seq(5)}, S1: {M1: Seq(6)}},
            retired={},
        ),
    )
    replica.apply_checkpoint(2, Delta(states={}, hwms={}, retired={M1: Seq(6)}))
    assert backup.evict_covered(replica.hwm) == 1
    assert [batch.mapper for batch in backup.batches()] == [M2]
    # A resend of M1's tuples is not stored again; M1's hwms are gone from the replica.
    assert not backup.add(make_batch(M1, [(2, 4, "c", 1)]), replica.hwm)
    assert replica.store.hwm_entries() == 0
    assert replica.hwm(M1, S2) == 6


def test_a_retired_newer_copy_is_not_counted_twice_from_an_older_copys_backup() -> None:
    """The older copy (an orphan) has M1's tuples of slot 0 in its backup only; the newer
    copy's primary applied them and then retired M1: its state holds them already."""
    older = replica_of(Delta(states={S0: {"a": {"count": 1}}}, hwms={S0: {M1: Seq(1)}}))
    older_backup = TupleBackup()
    older_backup.add(make_batch(M1, [(0, 2, "a", 1), (0, 3, "a", 1)]), older.hwm)
    newer = replica_of(Delta(states={S0: {"a": {"count": 3}}}, hwms={}, retired={M1: Seq(3)}))
    into = StateStore()
    outcome = promote(
        into, [PrimaryCopy(older, older_backup), PrimaryCopy(newer)], [S0], decode, count_words
    )
    assert (outcome.replayed, outcome.duplicates) == (0, 2)
    assert state_of(into, [S0])[0] == {(S0, "a"): {"count": 3}}


def test_a_copy_that_alone_holds_a_slot_replays_it_even_if_another_copy_retired_the_mapper() -> (
    None
):
    """Slot 1 is in the older copy only: its backup is all there is of M1's tuples there."""
    older = replica_of(Delta(states={}, hwms={S1: {M1: Seq(1)}}))
    older_backup = TupleBackup()
    older_backup.add(make_batch(M1, [(1, 2, "b", 1), (1, 3, "b", 1)]), older.hwm)
    newer = replica_of(Delta(states={S0: {"a": {"count": 3}}}, hwms={}, retired={M1: Seq(3)}))
    into = StateStore()
    outcome = promote(
        into,
        [PrimaryCopy(older, older_backup), PrimaryCopy(newer)],
        [S0, S1],
        decode,
        count_words,
    )
    assert outcome.replayed == 2
    assert state_of(into, [S0, S1])[0] == {(S0, "a"): {"count": 3}, (S1, "b"): {"count": 2}}
    # The promoted store knows of the retirement, and keeps M1's hwms until the node drops
    # them (nothing replays into it any more).
    assert dict(into.retired) == {M1: 3}
    assert into.hwm_entries() > 0
    into.forget_retired_hwms()
    assert into.hwm_entries() == 0


def test_adopting_a_retired_replica_keeps_the_hwms_the_node_still_needs() -> None:
    own = fed_store()
    replica = replica_of(
        Delta(states={S2: {"c": {"count": 1}}}, hwms={S2: {M2: Seq(4)}}, retired={M1: Seq(3)})
    )
    own.adopt(replica.store, [S2])
    assert dict(own.retired) == {M1: 3}
    assert dict(own.hwms_of(M1)) == {S0: 1, S1: 3}
    assert own.hwm(M2, S2) == 4
    assert own.forget_retired_hwms() == 2
    assert dict(own.hwms_of(M1)) == {}


def test_a_retirement_marks_nothing_else_and_a_mapper_unknown_here_still_counts() -> None:
    store = StateStore()
    store.retire(MapperId("never-seen"), Seq(10))
    assert store.hwm_entries() == 0
    assert dict(store.retired) == {"never-seen": 10}
    delta = store.swap()
    assert delta.retired == {"never-seen": 10} and not delta.states and not delta.hwms
