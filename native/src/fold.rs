//! Folds of the built-in aggregators (smr/agg.py and checkpoint/bulk.py are the reference):
//! partials merged per key, the additive fold into the active fragment, HyperLogLog registers.

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::columns::objects;
use crate::table::SlotTable;

fn same_length(keys: &[Bound<'_, PyAny>], values: &[Bound<'_, PyAny>]) -> PyResult<()> {
    if keys.len() != values.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{} keys but {} values",
            keys.len(),
            values.len()
        )));
    }
    Ok(())
}

/// `grouped[key] = grouped.get(key, 0) + value` for each pair, in order (a count's or a sum's
/// merge of partials); raises what `+` raises.
#[pyfunction]
pub fn group_add(
    grouped: &Bound<'_, PyDict>,
    keys: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let keys = objects(keys)?;
    let values = objects(values)?;
    same_length(&keys, &values)?;
    let zero = 0i64.into_pyobject(grouped.py())?;
    for (key, value) in keys.iter().zip(&values) {
        match grouped.get_item(key)? {
            Some(old) => grouped.set_item(key, old.add(value)?)?,
            None if value.is_exact_instance_of::<PyInt>() => grouped.set_item(key, value)?,
            None => grouped.set_item(key, zero.add(value)?)?,
        }
    }
    Ok(())
}

/// The partials of a sum folded per key on the mapper side (``smr.agg``'s ``lift_many``):
/// a key's first value as it is, then ``old + value``; a new dict in first-seen order.
#[pyfunction]
pub fn combine_add<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let keys = objects(keys)?;
    let values = objects(values)?;
    same_length(&keys, &values)?;
    let grouped = PyDict::new(py);
    for (key, value) in keys.iter().zip(&values) {
        match grouped.get_item(key)? {
            Some(old) => grouped.set_item(key, old.add(value)?)?,
            None => grouped.set_item(key, value)?,
        }
    }
    Ok(grouped)
}

/// For each pair: the smaller (``largest`` false: ``b if b < a else a``) or the larger
/// (``b if b > a else a``) of the key's partial so far and the value (min's and max's merge).
#[pyfunction]
pub fn group_pick(
    grouped: &Bound<'_, PyDict>,
    keys: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    largest: bool,
) -> PyResult<()> {
    let keys = objects(keys)?;
    let values = objects(values)?;
    same_length(&keys, &values)?;
    for (key, value) in keys.iter().zip(&values) {
        match grouped.get_item(key)? {
            Some(old) => {
                let replace = if largest { value.gt(&old)? } else { value.lt(&old)? };
                if replace {
                    grouped.set_item(key, value)?;
                }
            }
            None => grouped.set_item(key, value)?,
        }
    }
    Ok(())
}

/// Whether every value is a number (an int or a float, as `smr.agg` lifts them).
#[pyfunction]
pub fn all_numbers(values: &Bound<'_, PyAny>) -> PyResult<bool> {
    for value in objects(values)? {
        if !(value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>()) {
            return Ok(false);
        }
    }
    Ok(true)
}


/// The key's field ``name`` in one slot's keys (a dict, or a master slot's table): None
/// when the key is not held, Some(None) when it is held without the field.
fn held_field<'py>(
    keys_of_slot: &Bound<'py, PyAny>,
    key: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> PyResult<Option<Option<Bound<'py, PyAny>>>> {
    if let Ok(table) = keys_of_slot.cast::<SlotTable>() {
        let table = table.borrow();
        if let Some(value) = table.compact_field(key) {
            let found = if table.keeps(name)? { Some(value.into_pyobject(key.py())?.into_any()) } else { None };
            return Ok(Some(found));
        }
        return match table.lookup(key)? {
            Some(held) => Ok(Some(held.cast::<PyDict>()?.get_item(name)?)),
            None => Ok(None),
        };
    }
    match keys_of_slot.cast::<PyDict>()?.get_item(key)? {
        Some(held) => Ok(Some(held.cast::<PyDict>()?.get_item(name)?)),
        None => Ok(None),
    }
}

/// An exact int within [-2**63, 2**64), or an exact float.
fn in_state_range(value: &Bound<'_, PyAny>) -> bool {
    if value.is_exact_instance_of::<PyInt>() {
        return value.extract::<i64>().is_ok() || value.extract::<u64>().is_ok();
    }
    value.is_exact_instance_of::<PyFloat>()
}

/// The common case of `checkpoint.bulk.apply_folds` for a count or a sum (one owned field
/// ``name``, no tombstones; checkpoint/kernels.py's `fold_additive` is the reference): each
/// key of ``grouped`` whose field is found (in ``active``, else the first of ``older``
/// fragments that holds the key) takes the sum, written into ``active`` (in place when active
/// holds the key). Returns the keys left to the general fold, with their partials: new keys,
/// a field that is None, a sum that is not a number or leaves the 64-bit range.
#[pyfunction]
pub fn fold_additive<'py>(
    py: Python<'py>,
    grouped: &Bound<'py, PyDict>,
    slot_of: &Bound<'py, PyDict>,
    active: &Bound<'py, PyDict>,
    older: &Bound<'py, PyList>,
    name: &Bound<'py, PyString>,
    new_keys_take_partial: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let general = PyDict::new(py);
    let into = FoldInto::new(active, older, name, new_keys_take_partial)?;
    for (key, partial) in grouped.iter() {
        let slot = slot_of.get_item(&key)?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(key.clone().unbind()))?;
        if !into.fold_one(&key, &partial, &slot)? {
            general.set_item(&key, &partial)?;
        }
    }
    Ok(general)
}

/// Where `fold_additive` writes (``active``) and reads (``active``, then ``older``).
pub struct FoldInto<'py> {
    active: Bound<'py, PyDict>,
    older: Vec<Bound<'py, PyDict>>,
    name: Bound<'py, PyString>,
    new_keys_take_partial: bool,
}

impl<'py> FoldInto<'py> {
    pub fn new(
        active: &Bound<'py, PyDict>,
        older: &Bound<'py, PyList>,
        name: &Bound<'py, PyString>,
        new_keys_take_partial: bool,
    ) -> PyResult<Self> {
        let older: Vec<Bound<'py, PyDict>> =
            older.iter().map(|f| f.cast_into::<PyDict>().map_err(PyErr::from)).collect::<PyResult<_>>()?;
        Ok(FoldInto { active: active.clone(), older, name: name.clone(), new_keys_take_partial })
    }

    /// Write ``{name: value}`` as the key's entry in ``active``.
    fn put_entry(
        &self,
        active_keys: &Option<Bound<'py, PyAny>>,
        key: &Bound<'py, PyAny>,
        slot: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let py = key.py();
        let entry = PyDict::new(py);
        entry.set_item(&self.name, value)?;
        match active_keys {
            Some(keys) => keys.cast::<PyDict>()?.set_item(key, entry),
            None => {
                let keys = PyDict::new(py);
                keys.set_item(key, entry)?;
                self.active.set_item(slot, keys)
            }
        }
    }

    /// Fold one key's ``partial`` by `fold_additive`'s rule; false when the key is left to
    /// the general fold (then nothing is written).
    pub fn fold_one(
        &self,
        key: &Bound<'py, PyAny>,
        partial: &Bound<'py, PyAny>,
        slot: &Bound<'py, PyAny>,
    ) -> PyResult<bool> {
        let py = key.py();
        let name = &self.name;
        let active_keys = self.active.get_item(slot)?;
        let fields = match &active_keys {
            Some(keys) => keys.cast::<PyDict>()?.get_item(key)?,
            None => None,
        };
        let mut field: Option<Bound<'py, PyAny>> = None;
        let mut unheld = fields.is_none();
        if let Some(fields) = &fields {
            field = fields.cast::<PyDict>()?.get_item(name)?;
        } else {
            for fragment in &self.older {
                if let Some(keys_of_slot) = fragment.get_item(slot)? {
                    if let Some(held) = held_field(&keys_of_slot, key, name)? {
                        unheld = false;
                        if let Some(found) = held {
                            field = Some(found);
                            break;
                        }
                    }
                }
            }
        }
        let field = match field {
            Some(field) if !field.is_none() => field,
            _ => {
                if self.new_keys_take_partial && unheld && in_state_range(partial) {
                    self.put_entry(&active_keys, key, slot, partial)?;
                    return Ok(true);
                }
                return Ok(false);
            }
        };
        let summed = match field.add(partial) {
            Ok(summed) => summed,
            Err(error) if error.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => return Ok(false),
            Err(error) => return Err(error),
        };
        if summed.is_none() {
            return Ok(false);
        }
        if summed.is_exact_instance_of::<PyInt>() {
            // [-2**63, 2**64): an i64, or else a u64 (a wider int fails both).
            let in_range = summed.extract::<i64>().is_ok() || summed.extract::<u64>().is_ok();
            if !in_range {
                return Ok(false);
            }
        }
        if let Some(fields) = fields {
            fields.cast::<PyDict>()?.set_item(name, summed)?;
        } else {
            self.put_entry(&active_keys, key, slot, &summed)?;
        }
        Ok(true)
    }
}

/// Raise HyperLogLog ``registers`` (``2**precision`` bytes) by 64-bit ``hashes``, as
/// `smr.agg.approx_distinct`'s fold does: the top ``precision`` bits pick the register, the
/// rank of the rest (leading zeros + 1) raises it.
#[pyfunction]
pub fn hll_add(registers: &Bound<'_, PyByteArray>, hashes: &Bound<'_, PyAny>, precision: u32) -> PyResult<()> {
    let size = 1usize << precision;
    if registers.len() != size {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{} registers, not {size}",
            registers.len()
        )));
    }
    let rest_bits = 64 - precision;
    let hashes: Vec<u64> = objects(hashes)?.iter().map(|h| h.extract::<u64>()).collect::<PyResult<_>>()?;
    // Safety: no Python code runs while the slice is held (no call back into Python).
    let regs = unsafe { registers.as_bytes_mut() };
    for h in hashes {
        let index = (h >> rest_bits) as usize;
        let rest = if rest_bits == 64 { h } else { h & ((1u64 << rest_bits) - 1) };
        let bit_length = 64 - rest.leading_zeros();
        let rank = (rest_bits - bit_length + 1) as u8;
        if rank > regs[index] {
            regs[index] = rank;
        }
    }
    Ok(())
}
