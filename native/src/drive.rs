//! The per-tuple driver: the loop of checkpoint/apply.py's `apply_tuples` (the reference,
//! whose steps 3-5 it follows line by line) with a user's `reduce_fn` called straight from
//! here, so no Python frame of ours runs between two calls.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};

use crate::table::SlotTable;

/// What the caller hands over once per batch: the store's fragments and flags, and the
/// objects the reference compares with.
pub struct Context<'py> {
    active: Bound<'py, PyDict>,
    inactive: Option<Bound<'py, PyDict>>,
    master: Bound<'py, PyDict>,
    plain: Vec<Bound<'py, PyType>>,
    mutable: Bound<'py, PyTuple>,
    deepcopy: Bound<'py, PyAny>,
    no_fields: Bound<'py, PyAny>,
    tombstone: Bound<'py, PyAny>,
}

fn nested<'py>(outer: &Bound<'py, PyDict>, a: &Bound<'py, PyAny>, b: &Bound<'py, PyAny>) -> PyResult<(Option<Bound<'py, PyDict>>, Option<Bound<'py, PyDict>>)> {
    let Some(keys) = outer.get_item(a)? else { return Ok((None, None)) };
    if let Ok(table) = keys.cast::<SlotTable>() {
        // A master slot's table: its states read as dicts (no writes go to master here).
        let fields = match table.borrow().lookup(b)? {
            Some(fields) => Some(fields.cast_into::<PyDict>()?),
            None => None,
        };
        return Ok((None, fields));
    }
    let keys = keys.cast_into::<PyDict>()?;
    let fields = match keys.get_item(b)? {
        Some(fields) => Some(fields.cast_into::<PyDict>()?),
        None => None,
    };
    Ok((Some(keys), fields))
}

impl<'py> Context<'py> {
    fn is_plain(&self, value: &Bound<'py, PyAny>) -> bool {
        let class = value.get_type();
        self.plain.iter().any(|plain| class.is(plain))
    }

    fn is_mutable(&self, value: &Bound<'py, PyAny>) -> PyResult<bool> {
        Ok(!self.is_plain(value) && value.is_instance(&self.mutable)?)
    }
}

/// Step 3 of the reference: the key's merged state before the call (a fragment's own dict
/// where one alone is the merged state).
fn before<'py>(
    context: &Context<'py>,
    tombstones_possible: bool,
    active_fields: &Option<Bound<'py, PyDict>>,
    inactive_fields: &Option<Bound<'py, PyDict>>,
    master_fields: &Option<Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = context.active.py();
    if inactive_fields.is_none() {
        match (active_fields, master_fields) {
            (None, None) => return Ok(context.no_fields.clone()),
            (None, Some(master)) => return Ok(master.clone().into_any()),
            (Some(active), master) if !tombstones_possible => {
                let shadows = match master {
                    None => true,
                    Some(master) => master.keys().iter().try_fold(true, |all, name| {
                        Ok::<bool, PyErr>(all && active.contains(name)?)
                    })?,
                };
                if shadows {
                    return Ok(active.clone().into_any());
                }
            }
            _ => {}
        }
    }
    let merged = match master_fields {
        Some(master) => master.copy()?,
        None => PyDict::new(py),
    };
    if let Some(inactive) = inactive_fields {
        merged.update(inactive.as_mapping())?;
    }
    if let Some(active) = active_fields {
        merged.update(active.as_mapping())?;
    }
    if tombstones_possible {
        let dead: Vec<Bound<'py, PyAny>> = merged
            .iter()
            .filter(|(_, value)| value.is(&context.tombstone))
            .map(|(name, _)| name)
            .collect();
        for name in dead {
            merged.del_item(name)?;
        }
    }
    Ok(merged.into_any())
}

/// Reduce the rows (all fresh: the cut ran before) into ``active`` as the reference does.
/// Returns ``(failed, failures, wrote_tombstone, holds_mutables)``; an exception that is
/// not an ``Exception`` propagates (``applying`` then names the tuple it came from).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn drive_reduce<'py>(
    py: Python<'py>,
    fragments: (Bound<'py, PyDict>, Option<Bound<'py, PyDict>>, Bound<'py, PyDict>),
    flags: (bool, bool),
    columns: (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>),
    reduce_fn: Bound<'py, PyAny>,
    applying: Bound<'py, PyList>,
    types: (Bound<'py, PyAny>, Bound<'py, PyTuple>),
    helpers: (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>),
    failures_max: usize,
) -> PyResult<(usize, Bound<'py, PyList>, bool, bool)> {
    let (active, inactive, master) = fragments;
    let (mut tombstones_possible, mut holds_mutables) = flags;
    let plain = types.0.try_iter()?.map(|t| Ok(t?.cast_into::<PyType>()?)).collect::<PyResult<Vec<_>>>()?;
    let context = Context {
        active,
        inactive,
        master,
        plain,
        mutable: types.1,
        deepcopy: helpers.0,
        no_fields: helpers.1,
        tombstone: helpers.2,
    };
    let (slots, seqs, keys, values) = columns;
    let failures = PyList::empty(py);
    let mut failed = 0usize;
    let mut wrote_tombstone = false;
    let rows = keys.len()?;
    for row in 0..rows {
        let slot = slots.get_item(row)?;
        let seq = seqs.get_item(row)?;
        let key = keys.get_item(row)?;
        let value = values.get_item(row)?;
        // 3. Read and snapshot.
        let (mut active_keys, mut active_fields) = nested(&context.active, &slot, &key)?;
        let inactive_fields = match &context.inactive {
            Some(inactive) => nested(inactive, &slot, &key)?.1,
            None => None,
        };
        let master_fields = nested(&context.master, &slot, &key)?.1;
        let before = before(&context, tombstones_possible, &active_fields, &inactive_fields, &master_fields)?;
        let state = before.call_method0("copy")?.cast_into::<PyDict>()?;
        if holds_mutables {
            let copies: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> = state
                .iter()
                .filter(|(_, v)| context.is_mutable(v).unwrap_or(false))
                .collect();
            for (name, field) in copies {
                state.set_item(name, context.deepcopy.call1((field,))?)?;
            }
        }
        applying.set_item(1, &slot)?;
        applying.set_item(2, &seq)?;
        if let Err(error) = reduce_fn.call1((&key, &value, &state)) {
            if !error.is_instance_of::<PyException>(py) {
                return Err(error);
            }
            // 4. The reducer failed: drop its private state, keep an example.
            failed += 1;
            if failures.len() < failures_max {
                failures.append((&key, error.value(py)))?;
            }
            continue;
        }
        // 5. Commit the changed fields, then tombstone the fields state lacks.
        let before_count = before.len()?;
        let mut kept_count = 0usize;
        let ensure = |active_keys: &mut Option<Bound<'py, PyDict>>, active_fields: &mut Option<Bound<'py, PyDict>>| -> PyResult<Bound<'py, PyDict>> {
            if let Some(fields) = active_fields {
                return Ok(fields.clone());
            }
            let keys_of_slot = match active_keys {
                Some(keys) => keys.clone(),
                None => {
                    let keys = PyDict::new(py);
                    context.active.set_item(&slot, &keys)?;
                    *active_keys = Some(keys.clone());
                    keys
                }
            };
            let fields = PyDict::new(py);
            keys_of_slot.set_item(&key, &fields)?;
            *active_fields = Some(fields.clone());
            Ok(fields)
        };
        for (name, field) in state.iter() {
            if before.contains(&name)? {
                kept_count += 1;
                if context.is_plain(&field) {
                    let old = before.get_item(&name)?;
                    if field.is(&old) || field.eq(&old)? {
                        continue;
                    }
                } else if !field.is_instance(&context.mutable)? {
                    let unchanged = before
                        .get_item(&name)
                        .and_then(|old| Ok(field.is(&old) || field.eq(&old)?))
                        .unwrap_or(false); // an __eq__ that raises: a change
                    if unchanged {
                        continue;
                    }
                }
            }
            ensure(&mut active_keys, &mut active_fields)?.set_item(&name, &field)?;
            if !holds_mutables && context.is_mutable(&field)? {
                holds_mutables = true;
            }
        }
        if kept_count != before_count {
            let gone: Vec<Bound<'py, PyAny>> = before
                .try_iter()?
                .filter_map(|name| name.ok())
                .filter(|name| !state.contains(name).unwrap_or(true))
                .collect();
            for name in gone {
                ensure(&mut active_keys, &mut active_fields)?.set_item(name, &context.tombstone)?;
                tombstones_possible = true;
                wrote_tombstone = true;
            }
        }
    }
    Ok((failed, failures, wrote_tombstone, holds_mutables))
}
