//! smr's compiled hot path (`smr._native`): pure functions over bytes and Python objects,
//! no sockets, no threads. The Python implementations are the reference; `smr.native`
//! chooses between the two (`SMR_NATIVE`), and property tests hold them to the same answers.

use pyo3::prelude::*;

mod body;
mod columns;
mod cut;
mod drive;
mod fold;
mod scan;
mod table;
mod turn;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(body::decode_body, module)?)?;
    module.add_function(wrap_pyfunction!(body::encode_body, module)?)?;
    module.add_function(wrap_pyfunction!(cut::cut, module)?)?;
    module.add_function(wrap_pyfunction!(fold::group_add, module)?)?;
    module.add_function(wrap_pyfunction!(fold::group_pick, module)?)?;
    module.add_function(wrap_pyfunction!(fold::combine_add, module)?)?;
    module.add_function(wrap_pyfunction!(fold::all_numbers, module)?)?;
    module.add_function(wrap_pyfunction!(fold::fold_additive, module)?)?;
    module.add_function(wrap_pyfunction!(fold::hll_add, module)?)?;
    module.add_function(wrap_pyfunction!(drive::drive_reduce, module)?)?;
    module.add_function(wrap_pyfunction!(turn::fold_turn, module)?)?;
    module.add_function(wrap_pyfunction!(turn::fold_turn_bodies, module)?)?;
    module.add_function(wrap_pyfunction!(scan::body_folds, module)?)?;
    module.add_function(wrap_pyfunction!(scan::ids_problem, module)?)?;
    module.add_class::<table::SlotTable>()?;
    Ok(())
}
