//! Reading a batch's columns: one way for every function here.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// A column (a list, a tuple, or any iterable) as owned Python objects, in order; the
/// items are shared, not copied. A list or a tuple is read without the iterator protocol.
pub fn objects<'py>(column: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = column.cast_exact::<PyList>() {
        return Ok(list.iter().collect());
    }
    if let Ok(tuple) = column.cast_exact::<PyTuple>() {
        return Ok(tuple.iter().collect());
    }
    column.try_iter()?.collect()
}
