//! The high-water-mark cut (checkpoint/hwm.py's `cut` is the reference, and the rule).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::columns::objects;

/// A hasher for slot numbers (small ints chosen by a hash already): one multiply.
#[derive(Default)]
struct SlotHasher(u64);

impl Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type SlotMap<V> = HashMap<u64, V, BuildHasherDefault<SlotHasher>>;

/// `(fresh, marks, duplicates)` as `checkpoint.hwm.cut` answers them (its docstring states
/// the rule): `fresh` None when every row is new, else the new rows; `marks` the new mark
/// of each slot with a new row. One dict lookup per distinct slot.
#[pyfunction]
pub fn cut<'py>(
    py: Python<'py>,
    marks: &Bound<'py, PyDict>,
    slots: &Bound<'py, PyAny>,
    seqs: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let slot_objects = objects(slots)?;
    let seq_objects = objects(seqs)?;
    let rows = slot_objects.len();
    if seq_objects.len() != rows {
        return Err(PyValueError::new_err(format!(
            "batch columns differ in length: {rows} slots, {} seqs",
            seq_objects.len()
        )));
    }
    // slot -> its mark so far; the new marks in the order their slots took a new row, each
    // the seq of its slot's last new row (as the reference's dict).
    let mut running: SlotMap<u64> = SlotMap::with_capacity_and_hasher(rows, Default::default());
    let mut fresh: Vec<usize> = Vec::with_capacity(rows);
    let new_marks = PyDict::new(py);
    for (row, (slot_object, seq_object)) in slot_objects.iter().zip(&seq_objects).enumerate() {
        let slot = slot_object.extract::<u64>()?;
        let seq = seq_object.extract::<u64>()?;
        let mark = match running.get_mut(&slot) {
            Some(mark) => mark,
            None => {
                let start = match marks.get_item(slot_object)? {
                    Some(found) => found.extract::<u64>()?,
                    None => 0,
                };
                running.entry(slot).or_insert(start)
            }
        };
        if seq > *mark {
            *mark = seq;
            fresh.push(row);
            new_marks.set_item(slot_object, seq_object)?;
        }
    }
    let duplicates = rows - fresh.len();
    let fresh_object = if duplicates == 0 {
        py.None().into_bound(py)
    } else {
        PyList::new(py, fresh)?.into_any()
    };
    PyTuple::new(py, [fresh_object, new_marks.into_any(), duplicates.into_pyobject(py)?.into_any()])
}
