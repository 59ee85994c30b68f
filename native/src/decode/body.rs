//! The reading of an Avro body's bytes, as fastavro reads them: zig-zag varints (an
//! over-long one folded as fastavro's C reader folds it), sized slices, Python-style
//! indexes. Pure Rust: no Python object is touched here.

/// Why a body does not decode. `Python`: an exception is already set.
pub(crate) enum Fail {
    Eof(&'static str, usize),
    Msg(String),
    Overflow(String), // a time field beyond a date's range: OverflowError, as on fastavro's path
    Python,
}

pub(crate) type R<T> = Result<T, Fail>;

/// Arrays and maps of items that may take no bytes (null, empty records):
/// a block count beyond this is refused instead of building a list that size.
pub(crate) const ZERO_WIDTH_LIMIT: i64 = 1 << 24;

pub(crate) struct Body<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl Body<'_> {
    #[inline(always)]
    pub(crate) fn long(&mut self) -> R<i64> {
        let buf = self.buf;
        let mut pos = self.pos;
        let Some(&first) = buf.get(pos) else {
            return Err(Fail::Eof("long", pos));
        };
        pos += 1;
        let mut b = first as u64;
        let mut n = b & 0x7f;
        let mut shift: u32 = 7;
        while b & 0x80 != 0 {
            let Some(&next) = buf.get(pos) else {
                return Err(Fail::Eof("long", pos));
            };
            pos += 1;
            b = next as u64;
            // As fastavro's C reader on x86-64: the shift count modulo 64.
            n |= (b & 0x7f).wrapping_shl(shift);
            shift = shift.wrapping_add(7);
        }
        self.pos = pos;
        Ok(((n >> 1) ^ (n & 1).wrapping_neg()) as i64)
    }

    #[inline(always)]
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> R<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let out = &self.buf[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(Fail::Eof(what, self.pos)),
        }
    }

    #[inline(always)]
    pub(crate) fn sized(&mut self, what: &'static str) -> R<&[u8]> {
        let size = self.long()?;
        let remaining = self.buf.len() - self.pos;
        if size < 0 || size as u64 > remaining as u64 {
            return Err(Fail::Msg(format!(
                "{what} of {size} bytes at byte {} but {remaining} remain",
                self.pos
            )));
        }
        self.take(size as usize, what)
    }
}

/// Python's list indexing: -len..len, negative from the end.
#[inline(always)]
pub(crate) fn py_index(index: i64, len: usize, what: &str) -> R<usize> {
    let len_i = len as i64;
    let i = if index < 0 { index.wrapping_add(len_i) } else { index };
    if i < 0 || i >= len_i {
        return Err(Fail::Msg(format!("{what} index {index} out of range ({len})")));
    }
    Ok(i as usize)
}
