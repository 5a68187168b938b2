//! The high-water-mark cut (checkpoint/hwm.py's `cut` is the reference, and the rule).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::collections::HashMap;

/// A column as owned Python objects (the ints of a list are shared, not made anew).
fn objects<'py>(column: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = column.cast_exact::<PyList>() {
        return Ok(list.iter().collect());
    }
    if let Ok(tuple) = column.cast_exact::<PyTuple>() {
        return Ok(tuple.iter().collect());
    }
    column.try_iter()?.collect()
}

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
    // slot -> (its mark so far, the row that set it: None while it is the starting mark)
    let mut running: HashMap<u64, (u64, Option<usize>)> = HashMap::with_capacity(64);
    let mut fresh: Vec<usize> = Vec::with_capacity(rows);
    let mut slot_ids: Vec<u64> = Vec::with_capacity(rows);
    for (row, (slot_object, seq_object)) in slot_objects.iter().zip(&seq_objects).enumerate() {
        let slot = slot_object.extract::<u64>()?;
        let seq = seq_object.extract::<u64>()?;
        slot_ids.push(slot);
        let entry = match running.get_mut(&slot) {
            Some(entry) => entry,
            None => {
                let start = match marks.get_item(slot_object)? {
                    Some(found) => found.extract::<u64>()?,
                    None => 0,
                };
                running.entry(slot).or_insert((start, None))
            }
        };
        if seq > entry.0 {
            *entry = (seq, Some(row));
            fresh.push(row);
        }
    }
    // The new marks, in the order their slots first took a new row (as the reference's dict).
    let new_marks = PyDict::new(py);
    let mut first_fresh: Vec<(usize, usize)> = Vec::with_capacity(running.len());
    let mut seen: HashMap<u64, ()> = HashMap::with_capacity(running.len());
    for &row in &fresh {
        let slot = slot_ids[row];
        if seen.insert(slot, ()).is_none() {
            let last_row = running[&slot].1.unwrap_or(row);
            first_fresh.push((row, last_row));
        }
    }
    for (row, last_row) in first_fresh {
        new_marks.set_item(&slot_objects[row], &seq_objects[last_row])?;
    }
    let duplicates = rows - fresh.len();
    let fresh_object = if duplicates == 0 {
        py.None().into_bound(py)
    } else {
        PyList::new(py, fresh)?.into_any()
    };
    PyTuple::new(py, [fresh_object, new_marks.into_any(), duplicates.into_pyobject(py)?.into_any()])
}
