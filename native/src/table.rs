//! A slot's keys in master, for a count or a sum (checkpoint/tables.py's `PySlotTable` is the
//! reference): a key of exact type `str` whose state is `{field: int}` with the int in the
//! i64 range lives in a compact table (its UTF-8 bytes in one arena, 16 bytes of entry, a
//! 4-byte index), every other key in a Python dict beside it. A key is in one of the two,
//! never both, so the table answers as the dict `{key: {field: value}}` it stands for.

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyString};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// Marks an entry whose key left the compact part (its bytes stay as a tombstone of the
/// index until the next rebuild).
const DEAD: u32 = u32::MAX;
/// The index keeps at most this share of its places taken (numerator over 8).
const LOAD_EIGHTHS: usize = 6;

#[derive(Clone, Copy)]
struct Entry {
    start: u32,
    len: u32,
    value: i64,
}

/// Open addressing with linear probing over the entries: `index[i]` is 0 when empty, else
/// the entry's position + 1.
struct Compact {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    index: Vec<u32>,
    live: usize,
    hasher: RandomState,
}

enum Probe {
    Found(usize),
    Empty(usize),
}

impl Compact {
    fn new() -> Self {
        Compact { bytes: Vec::new(), entries: Vec::new(), index: Vec::new(), live: 0, hasher: RandomState::new() }
    }

    fn key_bytes(&self, entry: &Entry) -> &[u8] {
        &self.bytes[entry.start as usize..entry.start as usize + entry.len as usize]
    }

    fn probe(&self, key: &[u8], hash: u64) -> Probe {
        let mask = self.index.len() - 1;
        let mut at = (hash as usize) & mask;
        loop {
            let held = self.index[at];
            if held == 0 {
                return Probe::Empty(at);
            }
            let entry = &self.entries[held as usize - 1];
            let len = if entry.len == DEAD { u32::MAX } else { entry.len };
            if len as usize == key.len() && self.key_bytes(entry) == key {
                return Probe::Found(held as usize - 1);
            }
            at = (at + 1) & mask;
        }
    }

    fn find(&self, key: &[u8]) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        match self.probe(key, self.hasher.hash_one(key)) {
            Probe::Found(position) => Some(position),
            Probe::Empty(_) => None,
        }
    }

    fn get(&self, key: &[u8]) -> Option<i64> {
        self.find(key).map(|position| self.entries[position].value)
    }

    /// Rebuild the index at twice the live entries' need, dropping dead entries' bytes.
    fn rebuild(&mut self, places: usize) {
        let mut bytes = Vec::with_capacity(self.bytes.len());
        let mut entries = Vec::with_capacity(self.live);
        for entry in &self.entries {
            if entry.len != DEAD {
                let start = bytes.len() as u32;
                bytes.extend_from_slice(self.key_bytes(entry));
                entries.push(Entry { start, len: entry.len, value: entry.value });
            }
        }
        self.bytes = bytes;
        self.entries = entries;
        self.index = vec![0; places];
        let mask = places - 1;
        for (position, entry) in self.entries.iter().enumerate() {
            let key = &self.bytes[entry.start as usize..entry.start as usize + entry.len as usize];
            let mut at = (self.hasher.hash_one(key) as usize) & mask;
            while self.index[at] != 0 {
                at = (at + 1) & mask;
            }
            self.index[at] = position as u32 + 1;
        }
    }

    /// Set the key's value; false when the arena is full (the caller keeps the key elsewhere).
    fn set(&mut self, key: &[u8], value: i64) -> bool {
        if (self.entries.len() + 1) * 8 > self.index.len() * LOAD_EIGHTHS {
            // Between a quarter and half full after the rebuild: room to grow to 6/8.
            let places = ((self.live + 1) * 2).next_power_of_two().max(8);
            self.rebuild(places);
        }
        let hash = self.hasher.hash_one(key);
        match self.probe(key, hash) {
            Probe::Found(position) => {
                let entry = &mut self.entries[position];
                entry.value = value;
                true
            }
            Probe::Empty(at) => {
                if self.bytes.len() + key.len() > u32::MAX as usize - 1 || self.entries.len() + 2 >= u32::MAX as usize {
                    return false;
                }
                // Grow by a quarter, not double: memory per key is what the table is for.
                if self.bytes.len() + key.len() > self.bytes.capacity() {
                    self.bytes.reserve_exact(key.len().max(self.bytes.len() / 4).max(64));
                }
                if self.entries.len() == self.entries.capacity() {
                    self.entries.reserve_exact((self.entries.len() / 4).max(4));
                }
                let start = self.bytes.len() as u32;
                self.bytes.extend_from_slice(key);
                self.entries.push(Entry { start, len: key.len() as u32, value });
                self.index[at] = self.entries.len() as u32;
                self.live += 1;
                true
            }
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<i64> {
        let position = self.find(key)?;
        let entry = &mut self.entries[position];
        if entry.len == DEAD {
            return None;
        }
        // The bytes stay for the probe; a dead entry never matches a key of its length again.
        let value = entry.value;
        entry.len = DEAD;
        self.live -= 1;
        Some(value)
    }

    fn live_entries(&self) -> impl Iterator<Item = (&[u8], i64)> {
        self.entries.iter().filter(|e| e.len != DEAD).map(move |e| (self.key_bytes(e), e.value))
    }

    fn nbytes(&self) -> usize {
        self.bytes.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>() + self.index.capacity() * 4
    }
}

/// A slot's keys in master, as `{key: {field: value}}`; see the module's docstring.
#[pyclass(module = "smr._native")]
pub struct SlotTable {
    field: Py<PyString>,
    compact: Compact,
    others: Py<PyDict>,
    tombstone: Py<PyAny>,
}

/// The key's UTF-8 bytes when it is a `str` (a subclass is read as the `str` it holds).
fn str_bytes<'a>(key: &'a Bound<'_, PyAny>) -> Option<&'a [u8]> {
    key.cast::<PyString>().ok()?.to_str().ok().map(str::as_bytes)
}

/// The state's value when it is exactly `{field: int}` with the int in the i64 range.
fn compact_value(py: Python<'_>, field: &Py<PyString>, fields: &Bound<'_, PyAny>) -> Option<i64> {
    let fields = fields.cast_exact::<PyDict>().ok()?;
    if fields.len() != 1 {
        return None;
    }
    let value = fields.get_item(field.bind(py)).ok()??;
    if !value.is_exact_instance_of::<PyInt>() {
        return None;
    }
    value.extract::<i64>().ok()
}

impl SlotTable {
    fn state<'py>(&self, py: Python<'py>, value: i64) -> PyResult<Bound<'py, PyDict>> {
        let state = PyDict::new(py);
        state.set_item(self.field.bind(py), value)?;
        Ok(state)
    }

    fn find<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if let Some(bytes) = str_bytes(key) {
            if let Some(value) = self.compact.get(bytes) {
                return Ok(Some(self.state(py, value)?.into_any()));
            }
        }
        self.others.bind(py).get_item(key)
    }

    /// Store ``fields`` (live, non-empty) as the key's whole state.
    fn put(&mut self, py: Python<'_>, key: &Bound<'_, PyAny>, fields: &Bound<'_, PyAny>) -> PyResult<()> {
        let others = self.others.bind(py);
        if let (Some(bytes), Some(value)) = (str_bytes(key), compact_value(py, &self.field, fields)) {
            if (others.is_empty() || !others.contains(key)?) && self.compact.set(bytes, value) {
                return Ok(());
            }
        }
        if let Some(bytes) = str_bytes(key) {
            self.compact.remove(bytes);
        }
        others.set_item(key, fields)
    }

    fn delete(&mut self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        if let Some(bytes) = str_bytes(key) {
            if self.compact.remove(bytes).is_some() {
                return Ok(true);
            }
        }
        let others = self.others.bind(py);
        if others.contains(key)? {
            others.del_item(key)?;
            return Ok(true);
        }
        Ok(false)
    }

    fn key_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let keys = PyList::empty(py);
        for (bytes, _) in self.compact.live_entries() {
            // Safety: only valid UTF-8 (a str's) ever enters the arena.
            keys.append(PyString::new(py, unsafe { std::str::from_utf8_unchecked(bytes) }))?;
        }
        for key in self.others.bind(py).keys() {
            keys.append(key)?;
        }
        Ok(keys)
    }

    /// The field's value of a key in the compact part (no dict made), for the compiled folds.
    pub fn compact_field(&self, key: &Bound<'_, PyAny>) -> Option<i64> {
        str_bytes(key).and_then(|bytes| self.compact.get(bytes))
    }

    /// Whether ``name`` is the field this table keeps compact.
    pub fn keeps(&self, name: &Bound<'_, PyString>) -> PyResult<bool> {
        let field = self.field.bind(name.py());
        Ok(field.is(name) || field.as_any().eq(name.as_any())?)
    }

    /// The key's state as ``get`` answers it, or None.
    pub fn lookup<'py>(&self, key: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.find(key.py(), key)
    }
}

#[pymethods]
impl SlotTable {
    /// An empty table for states `{field: int}`; ``tombstone`` is the deleted-field marker.
    #[new]
    fn py_new(py: Python<'_>, field: Bound<'_, PyString>, tombstone: Bound<'_, PyAny>) -> Self {
        SlotTable { field: field.unbind(), compact: Compact::new(), others: PyDict::new(py).unbind(), tombstone: tombstone.unbind() }
    }

    #[getter]
    fn field(&self, py: Python<'_>) -> Py<PyString> {
        self.field.clone_ref(py)
    }

    /// The key's state, or ``default``: a fresh dict for a compact key (writing to it does
    /// not change the table), the held dict for another.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>, default: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.find(py, key)? {
            Some(state) => state,
            None => default.unwrap_or_else(|| py.None().into_bound(py)),
        })
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.find(py, key)?.ok_or_else(|| PyKeyError::new_err(key.clone().unbind()))
    }

    fn __setitem__(&mut self, py: Python<'_>, key: &Bound<'_, PyAny>, fields: &Bound<'_, PyAny>) -> PyResult<()> {
        self.put(py, key, fields)
    }

    fn __delitem__(&mut self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.delete(py, key)? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.clone().unbind()))
        }
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.find(py, key)?.is_some())
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.compact.live + self.others.bind(py).len()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.key_list(py)?.try_iter().map(Bound::into_any)
    }

    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.key_list(py)
    }

    /// ``(key, state)`` pairs, each state as ``get`` answers it.
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = PyList::empty(py);
        for (bytes, value) in self.compact.live_entries() {
            let key = PyString::new(py, unsafe { std::str::from_utf8_unchecked(bytes) });
            items.append((key, self.state(py, value)?))?;
        }
        for pair in self.others.bind(py).items() {
            items.append(pair)?;
        }
        Ok(items)
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let values = PyList::empty(py);
        for (_, value) in self.compact.live_entries() {
            values.append(self.state(py, value)?)?;
        }
        for state in self.others.bind(py).values() {
            values.append(state)?;
        }
        Ok(values)
    }

    #[pyo3(signature = (key, default=None))]
    fn pop<'py>(&mut self, py: Python<'py>, key: &Bound<'py, PyAny>, default: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        match self.find(py, key)? {
            Some(state) => {
                self.delete(py, key)?;
                Ok(state)
            }
            None => default.ok_or_else(|| PyKeyError::new_err(key.clone().unbind())),
        }
    }

    /// The table as a plain dict ``{key: {field: value}}`` (fresh dicts throughout).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (bytes, value) in self.compact.live_entries() {
            let key = PyString::new(py, unsafe { std::str::from_utf8_unchecked(bytes) });
            out.set_item(key, self.state(py, value)?)?;
        }
        for (key, fields) in self.others.bind(py).iter() {
            out.set_item(key, fields.call_method0("copy")?)?;
        }
        Ok(out)
    }

    /// Merge one slot's keys of a fragment (``checkpoint.delta.merge_into``'s rule): each
    /// field set, a tombstone deletes its field, a key left without fields goes. Never
    /// mutates ``keys`` nor keeps a dict of it.
    fn merge(&mut self, py: Python<'_>, keys: &Bound<'_, PyDict>) -> PyResult<()> {
        let tombstone = self.tombstone.clone_ref(py);
        let tombstone = tombstone.bind(py);
        for (key, fields) in keys.iter() {
            let fields = fields.cast_into::<PyDict>()?;
            // The common case: a compact key (or a new one) whose one field is set to an i64.
            if fields.len() == 1 {
                if let (Some(bytes), Some(value)) = (str_bytes(&key), compact_value(py, &self.field, fields.as_any())) {
                    let others = self.others.bind(py);
                    if others.is_empty() || self.compact.find(bytes).is_some() || !others.contains(&key)? {
                        if self.compact.set(bytes, value) {
                            continue;
                        }
                    }
                }
            }
            let current = match self.find(py, &key)? {
                Some(state) => state.cast_into::<PyDict>()?.copy()?,
                None => PyDict::new(py),
            };
            for (name, value) in fields.iter() {
                if value.is(tombstone) {
                    if current.contains(&name)? {
                        current.del_item(&name)?;
                    }
                } else {
                    current.set_item(&name, &value)?;
                }
            }
            if current.is_empty() {
                self.delete(py, &key)?;
            } else {
                self.delete(py, &key)?;
                self.put(py, &key, current.as_any())?;
            }
        }
        Ok(())
    }

    /// Bytes the table's own buffers hold (the compact part; the others dict not counted).
    fn compact_nbytes(&self) -> usize {
        self.compact.nbytes()
    }

    /// How many keys the compact part holds.
    fn compact_len(&self) -> usize {
        self.compact.live
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "SlotTable(field={}, compact={}, others={})",
            self.field.bind(py),
            self.compact.live,
            self.others.bind(py).len()
        )
    }
}
