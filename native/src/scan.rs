//! A batch body's rows read straight from its bytes, with no Python object made (for a
//! count's or a sum's turn, turn.rs): the body's slot and seq columns and its msgpack
//! `[keys, values]` when every key is a str or an int and every value an int within i64.
//! Any other body, malformed or not, is not read here: the caller decodes it (body.rs or
//! smr/wire/batch_body.py), which validates it and says why it is malformed.

use pyo3::prelude::*;

use crate::turn::KeyRef;

/// A body's rows: slot, seq, key (borrowed from the body's bytes) and value, per row.
pub struct BodyRows<'a> {
    pub slots: Vec<u64>,
    pub seqs: Vec<u64>,
    pub keys: Vec<KeyRef<'a>>,
    pub values: Vec<i64>,
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.data.len() - self.at < n {
            return None;
        }
        let bytes = &self.data[self.at..self.at + n];
        self.at += n;
        Some(bytes)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn be(&mut self, n: usize) -> Option<u64> {
        Some(self.take(n)?.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    /// An array's length (fixarray, array 16, array 32).
    fn array_len(&mut self) -> Option<usize> {
        match self.byte()? {
            marker @ 0x90..=0x9f => Some((marker & 0x0f) as usize),
            0xdc => Some(self.be(2)? as usize),
            0xdd => Some(self.be(4)? as usize),
            _ => None,
        }
    }

    /// An int of any msgpack width after its ``marker``, as the reference's dict keys it.
    fn int(&mut self, marker: u8) -> Option<KeyRef<'a>> {
        let value = match marker {
            0x00..=0x7f => i64::from(marker),
            0xe0..=0xff => i64::from(marker as i8),
            0xcc => self.be(1)? as i64,
            0xcd => self.be(2)? as i64,
            0xce => self.be(4)? as i64,
            0xcf => {
                let wide = self.be(8)?;
                return Some(match i64::try_from(wide) {
                    Ok(small) => KeyRef::Int(small),
                    Err(_) => KeyRef::Wide(wide),
                });
            }
            0xd0 => i64::from(self.be(1)? as u8 as i8),
            0xd1 => i64::from(self.be(2)? as u16 as i16),
            0xd2 => i64::from(self.be(4)? as u32 as i32),
            0xd3 => self.be(8)? as i64,
            _ => return None,
        };
        Some(KeyRef::Int(value))
    }

    /// A key: a str (valid UTF-8, as msgpack's strict decode requires) or an int.
    fn key(&mut self) -> Option<KeyRef<'a>> {
        let marker = self.byte()?;
        let length = match marker {
            0xa0..=0xbf => (marker & 0x1f) as usize,
            0xd9 => self.be(1)? as usize,
            0xda => self.be(2)? as usize,
            0xdb => self.be(4)? as usize,
            _ => return self.int(marker),
        };
        std::str::from_utf8(self.take(length)?).ok().map(KeyRef::Text)
    }

    /// A value: an int within i64.
    fn value(&mut self) -> Option<i64> {
        let marker = self.byte()?;
        match self.int(marker)? {
            KeyRef::Int(value) => Some(value),
            _ => None,
        }
    }
}

/// The rows of a body whose decode (``decode_batch_body``) surely succeeds with keys of
/// exact type str or int and values exact ints within i64: its length holds ``count``
/// rows, every slot is below ``slot_count``, every seq at least 1, its msgpack is exactly
/// ``[keys, values]`` of ``count`` items each, nothing after. None for any other body.
pub fn body_rows(body: &[u8], count: usize, slot_count: u64) -> Option<BodyRows<'_>> {
    if body.len() < count.checked_mul(20)? {
        return None;
    }
    let mut slots = Vec::with_capacity(count);
    let mut seqs = Vec::with_capacity(count);
    for row in 0..count {
        let slot = u64::from(u32::from_le_bytes(body[4 * row..4 * row + 4].try_into().ok()?));
        let at = 4 * count + 8 * row;
        let seq = u64::from_le_bytes(body[at..at + 8].try_into().ok()?);
        if slot >= slot_count || seq < 1 {
            return None;
        }
        slots.push(slot);
        seqs.push(seq);
    }
    let mut cursor = Cursor { data: &body[20 * count..], at: 0 };
    if cursor.array_len()? != 2 || cursor.array_len()? != count {
        return None;
    }
    let mut keys = Vec::with_capacity(count);
    for _ in 0..count {
        keys.push(cursor.key()?);
    }
    if cursor.array_len()? != count {
        return None;
    }
    let mut values = Vec::with_capacity(count);
    for _ in 0..count {
        values.push(cursor.value()?);
    }
    if cursor.at != cursor.data.len() {
        return None;
    }
    Some(BodyRows { slots, seqs, keys, values })
}

/// Whether ``fold_turn_bodies`` takes the body whole (see ``body_rows``): then it is valid,
/// and decoding it would give str or int keys and i64 int values. False says nothing more:
/// the body may be malformed, or hold what only a decode reads.
#[pyfunction]
pub fn body_folds(body: &[u8], count: usize, slot_count: u64) -> bool {
    body_rows(body, count, slot_count).is_some()
}

/// What is wrong with a body's slot and seq columns (``count`` of each, after ``count`` is
/// known to fit the body), as ``decode_batch_ids`` says it: the highest slot out of range
/// first, then a seq of 0; None when nothing is.
#[pyfunction]
pub fn ids_problem(body: &[u8], count: usize, slot_count: u64) -> PyResult<Option<String>> {
    if count == 0 {
        return Ok(None);
    }
    if body.len() < count.saturating_mul(12) {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("{} bytes hold no {count} ids", body.len())));
    }
    let slot_max = body[..4 * count].chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).max().unwrap_or(0);
    if u64::from(slot_max) >= slot_count {
        return Ok(Some(format!("slot {slot_max} out of range (slot count {slot_count})")));
    }
    let seq_min = body[4 * count..12 * count]
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .min()
        .unwrap_or(1);
    if seq_min < 1 {
        return Ok(Some("sequence numbers start at 1".into()));
    }
    Ok(None)
}
