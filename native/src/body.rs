//! The batch body (smr/batch_body.py is the reference): fixed-width slot, seq and timestamp
//! columns, then msgpack `[keys, values]`. Decoding and encoding here give what the msgpack
//! package gives with smr's options (`use_list=False, raw=False` to read, `use_bin_type=True`
//! to write), byte for byte; where a value falls outside what is written here (an ext type,
//! a subclass, nesting past the limit) the functions answer None and the caller takes the
//! Python path, which decides.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use std::collections::BTreeSet;

use crate::columns::objects;

/// Nesting deeper than this is left to the Python path (msgpack's own limits then apply).
const DEPTH_MAX: usize = 500;

/// Why a decode stopped: malformed input (an error for the caller), or something this
/// decoder leaves to the Python one.
enum Stop {
    Malformed(String),
    Unsupported,
    Python(PyErr),
}

impl From<PyErr> for Stop {
    fn from(error: PyErr) -> Self {
        Stop::Python(error)
    }
}

impl From<std::convert::Infallible> for Stop {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Stop> {
        if self.data.len() - self.at < n {
            return Err(Stop::Malformed("unexpected end of data".into()));
        }
        let bytes = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    fn byte(&mut self) -> Result<u8, Stop> {
        Ok(self.take(1)?[0])
    }

    fn be(&mut self, n: usize) -> Result<u64, Stop> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn remaining(&self) -> usize {
        self.data.len() - self.at
    }

    fn value<'py>(&mut self, py: Python<'py>, depth: usize) -> Result<Bound<'py, PyAny>, Stop> {
        if depth > DEPTH_MAX {
            return Err(Stop::Unsupported);
        }
        let marker = self.byte()?;
        let object = match marker {
            0x00..=0x7f => (marker as i64).into_pyobject(py)?.into_any(),
            0xe0..=0xff => ((marker as i8) as i64).into_pyobject(py)?.into_any(),
            0x80..=0x8f => return self.map(py, (marker & 0x0f) as usize, depth),
            0x90..=0x9f => return self.array(py, (marker & 0x0f) as usize, depth),
            0xa0..=0xbf => return self.string(py, (marker & 0x1f) as usize),
            0xc0 => py.None().into_bound(py),
            0xc2 => PyBool::new(py, false).to_owned().into_any(),
            0xc3 => PyBool::new(py, true).to_owned().into_any(),
            0xc4 => {
                let n = self.be(1)? as usize;
                PyBytes::new(py, self.take(n)?).into_any()
            }
            0xc5 => {
                let n = self.be(2)? as usize;
                PyBytes::new(py, self.take(n)?).into_any()
            }
            0xc6 => {
                let n = self.be(4)? as usize;
                PyBytes::new(py, self.take(n)?).into_any()
            }
            0xca => {
                let bits = self.be(4)? as u32;
                PyFloat::new(py, f64::from(f32::from_bits(bits))).into_any()
            }
            0xcb => PyFloat::new(py, f64::from_bits(self.be(8)?)).into_any(),
            0xcc => self.be(1)?.into_pyobject(py)?.into_any(),
            0xcd => self.be(2)?.into_pyobject(py)?.into_any(),
            0xce => self.be(4)?.into_pyobject(py)?.into_any(),
            0xcf => self.be(8)?.into_pyobject(py)?.into_any(),
            0xd0 => (self.be(1)? as u8 as i8 as i64).into_pyobject(py)?.into_any(),
            0xd1 => (self.be(2)? as u16 as i16 as i64).into_pyobject(py)?.into_any(),
            0xd2 => (self.be(4)? as u32 as i32 as i64).into_pyobject(py)?.into_any(),
            0xd3 => (self.be(8)? as i64).into_pyobject(py)?.into_any(),
            0xd9 => {
                let n = self.be(1)? as usize;
                return self.string(py, n);
            }
            0xda => {
                let n = self.be(2)? as usize;
                return self.string(py, n);
            }
            0xdb => {
                let n = self.be(4)? as usize;
                return self.string(py, n);
            }
            0xdc => {
                let n = self.be(2)? as usize;
                return self.array(py, n, depth);
            }
            0xdd => {
                let n = self.be(4)? as usize;
                return self.array(py, n, depth);
            }
            0xde => {
                let n = self.be(2)? as usize;
                return self.map(py, n, depth);
            }
            0xdf => {
                let n = self.be(4)? as usize;
                return self.map(py, n, depth);
            }
            0xc1 => return Err(Stop::Malformed("unknown marker 0xc1".into())),
            // ext types (0xc7-0xc9, 0xd4-0xd8) become msgpack's own objects: Python's path.
            _ => return Err(Stop::Unsupported),
        };
        Ok(object)
    }

    fn string<'py>(&mut self, py: Python<'py>, n: usize) -> Result<Bound<'py, PyAny>, Stop> {
        let bytes = self.take(n)?;
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(PyString::new(py, text).into_any()),
            Err(_) => Err(Stop::Malformed("invalid UTF-8 in a str".into())),
        }
    }

    fn array<'py>(
        &mut self,
        py: Python<'py>,
        n: usize,
        depth: usize,
    ) -> Result<Bound<'py, PyAny>, Stop> {
        if n > self.remaining() {
            return Err(Stop::Malformed(format!("array of {n} items in {} bytes", self.remaining())));
        }
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.value(py, depth + 1)?);
        }
        Ok(PyTuple::new(py, items)?.into_any())
    }

    fn map<'py>(&mut self, py: Python<'py>, n: usize, depth: usize) -> Result<Bound<'py, PyAny>, Stop> {
        if n.saturating_mul(2) > self.remaining() {
            return Err(Stop::Malformed(format!("map of {n} pairs in {} bytes", self.remaining())));
        }
        let dict = PyDict::new(py);
        for _ in 0..n {
            let key = self.value(py, depth + 1)?;
            let value = self.value(py, depth + 1)?;
            if let Err(error) = dict.set_item(key, value) {
                return Err(Stop::Malformed(format!("map key: {error}")));
            }
        }
        Ok(dict.into_any())
    }
}

fn le_u32(data: &[u8], row: usize) -> u32 {
    u32::from_le_bytes(data[4 * row..4 * row + 4].try_into().unwrap())
}

fn le_u64(data: &[u8], row: usize) -> u64 {
    u64::from_le_bytes(data[8 * row..8 * row + 8].try_into().unwrap())
}

/// `(slots, seqs, keys, values)` of a batch body, validated as `decode_batch_body` does
/// (the timestamps the caller reads itself); ValueError naming what is malformed, or None
/// when the body holds what only the Python path decodes.
#[pyfunction]
pub fn decode_body<'py>(
    py: Python<'py>,
    body: &[u8],
    count: usize,
    slot_count: u64,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let malformed = |text: String| Err(PyValueError::new_err(text));
    if body.len() < count.saturating_mul(20) {
        return malformed(format!(
            "batch body of {} bytes is too short for {count} tuples",
            body.len()
        ));
    }
    let slot_bytes = &body[..4 * count];
    let seq_bytes = &body[4 * count..12 * count];
    let mut slots = Vec::with_capacity(count);
    let mut seqs = Vec::with_capacity(count);
    let (mut slot_max, mut seq_min) = (0u32, u64::MAX);
    for row in 0..count {
        let slot = le_u32(slot_bytes, row);
        let seq = le_u64(seq_bytes, row);
        slot_max = slot_max.max(slot);
        seq_min = seq_min.min(seq);
        slots.push(slot);
        seqs.push(seq);
    }
    if count > 0 {
        if u64::from(slot_max) >= slot_count {
            return malformed(format!("slot {slot_max} out of range (slot count {slot_count})"));
        }
        if seq_min < 1 {
            return malformed("sequence numbers start at 1".into());
        }
    }
    let mut reader = Reader { data: &body[20 * count..], at: 0 };
    let columns = match reader.value(py, 0) {
        Ok(columns) => columns,
        Err(Stop::Malformed(text)) => return malformed(format!("malformed batch body: {text}")),
        Err(Stop::Unsupported) => return Ok(None),
        Err(Stop::Python(error)) => return Err(error),
    };
    if reader.remaining() != 0 {
        return malformed("malformed batch body: extra data after the columns".into());
    }
    let columns = match columns.cast_exact::<PyTuple>() {
        Ok(columns) if columns.len() == 2 => columns.clone(),
        _ => return malformed("batch body must end with [keys, values]".into()),
    };
    let keys = columns.get_item(0)?;
    let values = columns.get_item(1)?;
    let (Ok(keys), Ok(values)) = (keys.cast_exact::<PyTuple>(), values.cast_exact::<PyTuple>())
    else {
        return malformed("batch keys and values must be arrays".into());
    };
    if keys.len() != count || values.len() != count {
        return malformed(format!("batch columns do not all hold the announced {count} tuples"));
    }
    let mut bad: BTreeSet<String> = BTreeSet::new();
    for key in keys.iter() {
        if !(key.is_exact_instance_of::<PyString>() || key.is_exact_instance_of::<PyInt>()) {
            bad.insert(key.get_type().name()?.to_string());
        }
    }
    if !bad.is_empty() {
        let names: Vec<String> = bad.into_iter().collect();
        return malformed(format!("keys must be str or int, got {}", names.join(", ")));
    }
    let slots = PyList::new(py, slots)?;
    let seqs = PyList::new(py, seqs)?;
    Ok(Some(PyTuple::new(py, [slots.into_any(), seqs.into_any(), keys.clone().into_any(), values.clone().into_any()])?))
}

/// Why an encode stopped: a value this writer leaves to msgpack (which packs it or raises).
struct Fallback;

impl From<PyErr> for Fallback {
    fn from(_: PyErr) -> Self {
        Fallback
    }
}

fn write_len(out: &mut Vec<u8>, n: usize, fix: Option<(u8, usize)>, markers: [u8; 3]) -> Result<(), Fallback> {
    if let Some((base, limit)) = fix {
        if n < limit {
            out.push(base | n as u8);
            return Ok(());
        }
    }
    if markers[0] != 0 && n < 0x100 {
        out.push(markers[0]);
        out.push(n as u8);
    } else if n < 0x1_0000 {
        out.push(markers[1]);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n <= u32::MAX as usize {
        out.push(markers[2]);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        return Err(Fallback);
    }
    Ok(())
}

fn write_int(out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> Result<(), Fallback> {
    if let Ok(v) = value.extract::<i64>() {
        if v >= 0 {
            write_uint(out, v as u64);
        } else if v >= -32 {
            out.push(v as i8 as u8);
        } else if v >= -128 {
            out.push(0xd0);
            out.push(v as i8 as u8);
        } else if v >= -32768 {
            out.push(0xd1);
            out.extend_from_slice(&(v as i16).to_be_bytes());
        } else if v >= -2_147_483_648 {
            out.push(0xd2);
            out.extend_from_slice(&(v as i32).to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&v.to_be_bytes());
        }
        return Ok(());
    }
    let v: u64 = value.extract()?; // past u64: msgpack raises OverflowError on its path
    write_uint(out, v);
    Ok(())
}

fn write_uint(out: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        out.push(v as u8);
    } else if v < 0x100 {
        out.push(0xcc);
        out.push(v as u8);
    } else if v < 0x1_0000 {
        out.push(0xcd);
        out.extend_from_slice(&(v as u16).to_be_bytes());
    } else if v < 0x1_0000_0000 {
        out.push(0xce);
        out.extend_from_slice(&(v as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

fn write_value(out: &mut Vec<u8>, value: &Bound<'_, PyAny>, depth: usize) -> Result<(), Fallback> {
    if depth > DEPTH_MAX {
        return Err(Fallback);
    }
    if value.is_none() {
        out.push(0xc0);
    } else if let Ok(flag) = value.cast_exact::<PyBool>() {
        out.push(if flag.is_true() { 0xc3 } else { 0xc2 });
    } else if value.is_exact_instance_of::<PyInt>() {
        write_int(out, value)?;
    } else if let Ok(text) = value.cast_exact::<PyString>() {
        let text = text.to_str()?; // a lone surrogate: msgpack's path raises
        write_len(out, text.len(), Some((0xa0, 32)), [0xd9, 0xda, 0xdb])?;
        out.extend_from_slice(text.as_bytes());
    } else if let Ok(number) = value.cast_exact::<PyFloat>() {
        out.push(0xcb);
        out.extend_from_slice(&number.value().to_bits().to_be_bytes());
    } else if let Ok(bytes) = value.cast_exact::<PyBytes>() {
        let bytes = bytes.as_bytes();
        write_len(out, bytes.len(), None, [0xc4, 0xc5, 0xc6])?;
        out.extend_from_slice(bytes);
    } else if let Ok(items) = value.cast_exact::<PyTuple>() {
        write_len(out, items.len(), Some((0x90, 16)), [0, 0xdc, 0xdd])?;
        for item in items.iter() {
            write_value(out, &item, depth + 1)?;
        }
    } else if let Ok(items) = value.cast_exact::<PyList>() {
        write_len(out, items.len(), Some((0x90, 16)), [0, 0xdc, 0xdd])?;
        for item in items.iter() {
            write_value(out, &item, depth + 1)?;
        }
    } else if let Ok(map) = value.cast_exact::<PyDict>() {
        write_len(out, map.len(), Some((0x80, 16)), [0, 0xde, 0xdf])?;
        for (key, item) in map.iter() {
            write_value(out, &key, depth + 1)?;
            write_value(out, &item, depth + 1)?;
        }
    } else {
        return Err(Fallback);
    }
    Ok(())
}

fn write_column(out: &mut Vec<u8>, column: &Bound<'_, PyAny>) -> Result<(), Fallback> {
    let n = column.len()?;
    let items = objects(column)?;
    if items.len() != n {
        return Err(Fallback);
    }
    write_len(out, n, Some((0x90, 16)), [0, 0xdc, 0xdd])?;
    for item in &items {
        write_value(out, item, 1)?;
    }
    Ok(())
}

/// The body `encode_batch_body` makes of these columns, the same bytes; None when a value
/// is one this writer leaves to the Python path (which packs it or raises as it always did).
#[pyfunction]
pub fn encode_body<'py>(
    py: Python<'py>,
    slots: &Bound<'py, PyAny>,
    seqs: &Bound<'py, PyAny>,
    keys: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
    ts: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let count = slots.len()?;
    if seqs.len()? != count || ts.len()? != count {
        return Ok(None);
    }
    let mut out: Vec<u8> = Vec::with_capacity(count * 32 + 16);
    let Ok(slot_values) = slots.extract::<Vec<u32>>() else { return Ok(None) };
    let Ok(seq_values) = seqs.extract::<Vec<u64>>() else { return Ok(None) };
    let Ok(ts_values) = ts.extract::<Vec<f64>>() else { return Ok(None) };
    for slot in slot_values {
        out.extend_from_slice(&slot.to_le_bytes());
    }
    for seq in seq_values {
        out.extend_from_slice(&seq.to_le_bytes());
    }
    for stamp in ts_values {
        out.extend_from_slice(&stamp.to_le_bytes());
    }
    out.push(0x92);
    if write_column(&mut out, keys).is_err() || write_column(&mut out, values).is_err() {
        return Ok(None);
    }
    Ok(Some(PyBytes::new(py, &out)))
}
