//! A turn of batches for a count or a sum applied in one call (checkpoint/bulk.py's
//! `apply_folds` is the reference): the duplicate cut of each batch against its mapper's
//! marks (checkpoint/hwm.py's rule, marks carried from batch to batch), the fresh rows'
//! values added per key with no Python object made per row, the fold into ``active``.
//! The batches come as decoded columns (`fold_turn`) or as their wire bytes
//! (`fold_turn_bodies`, read by scan.rs: then a Python object is made per key, not per row).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use crate::columns::objects;
use crate::fold::FoldInto;
use crate::scan::body_rows;

/// FxHash's multiplier: spreads a word's bits over the high ones.
const SPREAD: u64 = 0x517c_c1b7_2722_0a95;

/// One multiply per word written: keys are short and the table is rebuilt every turn.
#[derive(Default)]
struct QuickHasher(u64);

impl Hasher for QuickHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let word = u64::from_le_bytes(chunk.try_into().unwrap());
            self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SPREAD);
        }
        for byte in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*byte)).wrapping_mul(SPREAD);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(SPREAD);
    }
    fn write_u8(&mut self, value: u8) {
        self.write_u64(u64::from(value));
    }
    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }
}

type Quick = BuildHasherDefault<QuickHasher>;

/// A key as the reference's dict tells keys apart: an exact `str` by its text, an exact
/// `int` by its value (the two never equal each other; an int past i64 is a `Wide` one).
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum KeyRef<'a> {
    Text(&'a str),
    Int(i64),
    Wide(u64),
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            KeyRef::Text(text) => {
                state.write(text.as_bytes());
                state.write_u8(0xff);
            }
            KeyRef::Int(value) => state.write_u64(*value as u64),
            KeyRef::Wide(value) => state.write_u64(*value),
        }
    }
}

impl KeyRef<'_> {
    /// The key as the Python object a decode makes of it.
    fn to_object<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            KeyRef::Text(text) => PyString::new(py, text).into_any(),
            KeyRef::Int(value) => value.into_pyobject(py)?.into_any(),
            KeyRef::Wide(value) => value.into_pyobject(py)?.into_any(),
        })
    }
}

/// One batch's rows as the turn reads them: its mapper's place in the marks list, and per
/// row the slot, the seq, the key and the value.
struct Rows<'a> {
    mapper: usize,
    slots: Vec<u64>,
    seqs: Vec<u64>,
    keys: Vec<KeyRef<'a>>,
    values: Vec<i64>,
}

/// One batch's columns as Python objects: its mapper's place, its keys' objects, and its
/// other columns read.
struct Columns<'py> {
    mapper: usize,
    slots: Vec<u64>,
    seqs: Vec<u64>,
    keys: Vec<Bound<'py, PyAny>>,
    values: Vec<i64>,
}

impl Columns<'_> {
    /// The rows, or None when a key is one only the reference takes (see ``key_ref``).
    fn rows(&self) -> Option<Rows<'_>> {
        let keys = self.keys.iter().map(key_ref).collect::<Option<Vec<_>>>()?;
        Some(Rows { mapper: self.mapper, slots: self.slots.clone(), seqs: self.seqs.clone(), keys, values: self.values.clone() })
    }
}

fn mapper_index(mapper: usize, mappers: usize) -> PyResult<usize> {
    if mapper >= mappers {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("mapper {mapper} of {mappers}")));
    }
    Ok(mapper)
}

/// The batch's columns, or None when a row holds what only the reference takes (a value
/// not an exact i64 int, a slot or a seq not a u64, columns of unequal lengths).
fn read_columns<'py>(batch: &Bound<'py, PyAny>, mappers: usize) -> PyResult<Option<Columns<'py>>> {
    let batch = batch.cast::<PyTuple>()?;
    let mapper = mapper_index(batch.get_item(0)?.extract()?, mappers)?;
    let slot_objects = objects(&batch.get_item(1)?)?;
    let seq_objects = objects(&batch.get_item(2)?)?;
    let keys = objects(&batch.get_item(3)?)?;
    let value_objects = objects(&batch.get_item(4)?)?;
    let rows = keys.len();
    if slot_objects.len() != rows || seq_objects.len() != rows || value_objects.len() != rows {
        return Ok(None);
    }
    let mut slots = Vec::with_capacity(rows);
    let mut seqs = Vec::with_capacity(rows);
    let mut values = Vec::with_capacity(rows);
    for row in 0..rows {
        let (Ok(slot), Ok(seq)) = (slot_objects[row].extract::<u64>(), seq_objects[row].extract::<u64>()) else {
            return Ok(None);
        };
        let value = &value_objects[row];
        if !value.is_exact_instance_of::<PyInt>() {
            return Ok(None);
        }
        let Ok(value) = value.extract::<i64>() else { return Ok(None) };
        slots.push(slot);
        seqs.push(seq);
        values.push(value);
    }
    Ok(Some(Columns { mapper, slots, seqs, keys, values }))
}

fn key_ref<'a>(key: &'a Bound<'_, PyAny>) -> Option<KeyRef<'a>> {
    if key.is_exact_instance_of::<PyString>() {
        // A lone surrogate has no UTF-8 form: the reference takes such a key.
        return key.cast::<PyString>().ok()?.to_str().ok().map(KeyRef::Text);
    }
    if key.is_exact_instance_of::<PyInt>() {
        if let Ok(value) = key.extract::<i64>() {
            return Some(KeyRef::Int(value));
        }
        return key.extract::<u64>().ok().map(KeyRef::Wide);
    }
    None
}

/// A key's partial so far: its first row (batch and row), its last fresh row (its slot),
/// the sum, the fresh rows.
struct Group {
    batch: usize,
    row: usize,
    last: (usize, usize),
    partial: i128,
    rows: usize,
}

/// The marks of one mapper during the turn: each slot's mark so far (read from the store's
/// dict once), whether it rose, and the slots that rose in the order they did.
#[derive(Default)]
struct Running {
    marks: HashMap<u64, (u64, bool), Quick>,
    rose: Vec<u64>,
}

/// What the fold of a turn needs besides its rows: the store's marks (read only), the
/// store's call that takes the new ones, and where the fold reads and writes.
struct TurnInto<'a, 'py> {
    marks: &'a Bound<'py, PyList>,
    take_marks: &'a Bound<'py, PyAny>,
    active: &'a Bound<'py, PyDict>,
    older: &'a Bound<'py, PyList>,
    name: &'a Bound<'py, PyString>,
    new_keys_take_partial: bool,
}

/// `checkpoint.bulk.apply_folds` of a count or a sum (one owned field ``name``, no
/// tombstones) over ``batches`` (each ``(mapper index, slots, seqs, keys, values)``) in one
/// call: each batch cut against its mapper's marks (``marks``: the store's dict of each
/// mapper, by index, read only), the fresh rows' values added per key (first-seen order, a
/// key's slot that of its last fresh row), ``take_marks`` called once with the new marks of
/// each mapper (a list of dicts, by index), then each key folded into ``active`` by
/// `fold_additive`'s rule. Returns ``(general, slot_of, rows, tuples, duplicates)``: the
/// keys left to the general fold with their partials, their slots, and the fresh rows of
/// each (a list in ``general``'s order). None, with nothing written, when a batch holds
/// what only the reference takes (see ``read_columns``; a key not an exact str or an
/// exact int within [-2**63, 2**64), a str with a lone surrogate).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fold_turn<'py>(
    py: Python<'py>,
    marks: &Bound<'py, PyList>,
    batches: &Bound<'py, PyAny>,
    take_marks: &Bound<'py, PyAny>,
    active: &Bound<'py, PyDict>,
    older: &Bound<'py, PyList>,
    name: &Bound<'py, PyString>,
    new_keys_take_partial: bool,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let mut columns = Vec::new();
    for batch in objects(batches)? {
        match read_columns(&batch, marks.len())? {
            Some(read) => columns.push(read),
            None => return Ok(None),
        }
    }
    let mut read = Vec::with_capacity(columns.len());
    for of_batch in &columns {
        match of_batch.rows() {
            Some(rows) => read.push(rows),
            None => return Ok(None),
        }
    }
    let into = TurnInto { marks, take_marks, active, older, name, new_keys_take_partial };
    // The key's own object: the same one the batch holds.
    fold_rows(py, &into, &read, |batch, row| Ok(columns[batch].keys[row].clone())).map(Some)
}

/// `fold_turn` over batches in their wire bytes: ``bodies``, each ``(mapper index, body,
/// count)``, every body one ``body_folds`` takes (of ``slot_count`` slots). A key's object
/// is made once, when it is folded. None, with nothing written, when a body is not one
/// ``body_folds`` takes (the caller decodes the batches and takes the other path).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fold_turn_bodies<'py>(
    py: Python<'py>,
    marks: &Bound<'py, PyList>,
    bodies: &Bound<'py, PyAny>,
    slot_count: u64,
    take_marks: &Bound<'py, PyAny>,
    active: &Bound<'py, PyDict>,
    older: &Bound<'py, PyList>,
    name: &Bound<'py, PyString>,
    new_keys_take_partial: bool,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let mut held = Vec::new();
    for item in objects(bodies)? {
        let item = item.cast::<PyTuple>()?;
        let mapper = mapper_index(item.get_item(0)?.extract()?, marks.len())?;
        let body = item.get_item(1)?.cast_into::<PyBytes>()?;
        let count: usize = item.get_item(2)?.extract()?;
        held.push((mapper, body, count));
    }
    let mut read = Vec::with_capacity(held.len());
    for (mapper, body, count) in &held {
        let Some(rows) = body_rows(body.as_bytes(), *count, slot_count) else { return Ok(None) };
        read.push(Rows { mapper: *mapper, slots: rows.slots, seqs: rows.seqs, keys: rows.keys, values: rows.values });
    }
    let into = TurnInto { marks, take_marks, active, older, name, new_keys_take_partial };
    fold_rows(py, &into, &read, |batch, row| read[batch].keys[row].to_object(py)).map(Some)
}

/// The turn after its rows are read: the cut and merge, the new marks taken, each key folded
/// (``key_object``: the object of a batch's row's key); ``fold_turn``'s answer.
fn fold_rows<'py>(
    py: Python<'py>,
    into: &TurnInto<'_, 'py>,
    read: &[Rows<'_>],
    key_object: impl Fn(usize, usize) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let turn = cut_and_merge(into.marks, read)?;
    let new_marks = PyList::empty(py);
    for of_mapper in &turn.running {
        let raised = PyDict::new(py);
        for slot in &of_mapper.rose {
            raised.set_item(slot, of_mapper.marks[slot].0)?;
        }
        new_marks.append(raised)?;
    }
    into.take_marks.call1((new_marks,))?;
    let fold = FoldInto::new(into.active, into.older, into.name, into.new_keys_take_partial)?;
    let general = PyDict::new(py);
    let slot_of = PyDict::new(py);
    let mut rows = Vec::new();
    for group in &turn.groups {
        let key = key_object(group.batch, group.row)?;
        let slot = read[group.last.0].slots[group.last.1].into_pyobject(py)?.into_any();
        let partial = match i64::try_from(group.partial) {
            Ok(small) => small.into_pyobject(py)?.into_any(),
            Err(_) => group.partial.into_pyobject(py)?.into_any(),
        };
        if !fold.fold_one(&key, &partial, &slot)? {
            general.set_item(&key, &partial)?;
            slot_of.set_item(&key, &slot)?;
            rows.push(group.rows);
        }
    }
    let parts: [Bound<'py, PyAny>; 5] = [
        general.into_any(),
        slot_of.into_any(),
        PyList::new(py, rows)?.into_any(),
        turn.total.into_pyobject(py)?.into_any(),
        turn.duplicates.into_pyobject(py)?.into_any(),
    ];
    PyTuple::new(py, parts)
}

/// A turn cut and merged: each mapper's marks, the fresh rows' groups, the tuples seen.
struct Turn {
    running: Vec<Running>,
    groups: Vec<Group>,
    total: usize,
    duplicates: usize,
}

/// The cut of every batch against its mapper's marks (``marks``, read only), carried from
/// batch to batch, and the fresh rows added per key in first-seen order.
fn cut_and_merge(marks: &Bound<'_, PyList>, read: &[Rows<'_>]) -> PyResult<Turn> {
    let mut running: Vec<Running> = (0..marks.len()).map(|_| Running::default()).collect();
    let mut index: HashMap<KeyRef<'_>, usize, Quick> = HashMap::default();
    let mut groups: Vec<Group> = Vec::new();
    let (mut total, mut duplicates) = (0usize, 0usize);
    for (at, rows) in read.iter().enumerate() {
        total += rows.keys.len();
        let of_mapper = &mut running[rows.mapper];
        let store_marks = marks.get_item(rows.mapper)?;
        let store_marks = store_marks.cast::<PyDict>()?;
        for row in 0..rows.keys.len() {
            let (slot, seq) = (rows.slots[row], rows.seqs[row]);
            let mark = match of_mapper.marks.get_mut(&slot) {
                Some(mark) => mark,
                None => {
                    let start = match store_marks.get_item(slot)? {
                        Some(found) => found.extract::<u64>()?,
                        None => 0,
                    };
                    of_mapper.marks.entry(slot).or_insert((start, false))
                }
            };
            if seq <= mark.0 {
                duplicates += 1;
                continue;
            }
            mark.0 = seq;
            if !mark.1 {
                mark.1 = true;
                of_mapper.rose.push(slot);
            }
            let value = i128::from(rows.values[row]);
            match index.get(&rows.keys[row]) {
                Some(&group) => {
                    let group = &mut groups[group];
                    group.last = (at, row);
                    group.partial += value;
                    group.rows += 1;
                }
                None => {
                    index.insert(rows.keys[row], groups.len());
                    groups.push(Group { batch: at, row, last: (at, row), partial: value, rows: 1 });
                }
            }
        }
    }
    Ok(Turn { running, groups, total, duplicates })
}
