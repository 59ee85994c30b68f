//! `verify --follow`'s timed checkpoint, the per-stream part in one call: every stream
//! placed into since the last one (and those the follower names), sorted, each as its
//! state record for the compacted state topic, byte for byte what Python's `stream_key`
//! and `stream_record` write from `stream_state` (`turnaudit.verify.follow_records`).
//! A stream with open gaps (their times are the follower's) comes back with its state
//! alone, for Python to write.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::state::State;
use super::stream::{StreamKey, StreamKeyView};
use super::tracker::NativeStreamTracker;
use crate::hashing::FastSet;

/// The state topic's key of a stream's record, `"stream:"` and the stream as
/// `json.dumps([session, producer])` writes it.
const STREAM_KEY: &str = "stream:";

/// Records written per chunk: the tracker's lock is held while a chunk is written into
/// one reused buffer and released while Python's objects are made from it (no Rust
/// allocation per record: at a million live sessions a checkpoint writes half a million,
/// and fresh allocations of that size cost more in page faults than the writing).
const CHUNK: usize = 4096;

/// One record of a chunk: where its pieces lie in the chunk's buffer.
struct Placed {
    partition: Option<i64>,
    key: std::ops::Range<usize>,
    /// `None`: the stream has open gaps; `state` is its state, for Python to write.
    value: Option<std::ops::Range<usize>>,
    state: std::ops::Range<usize>,
    stream: usize, // index into the sorted keys
}

impl NativeStreamTracker {
    /// The records of the streams placed into since the last call (taken from the
    /// tracker's dirty set) and of `extra`, sorted by (session, producer) as Python sorts
    /// them (UTF-8 byte order is code point order), each once; a stream no longer held
    /// is left out. Streams in `gapped` come back with their state alone (see
    /// `checkpoint_out`).
    pub(crate) fn checkpoint_records<'py>(
        &self,
        py: Python<'py>,
        extra: Vec<StreamKey>,
        gapped: &FastSet<StreamKey>,
    ) -> PyResult<CheckpointOut<'py>> {
        let mut streams: Vec<StreamKey> = self.lock()?.take_dirty();
        streams.extend(extra);
        streams.sort_unstable();
        streams.dedup();
        let written = PyList::empty(py);
        let gapped_out = PyList::empty(py);
        let empty = PyBytes::new(py, b"");
        let mut buf: Vec<u8> = Vec::new();
        let mut placed: Vec<Placed> = Vec::with_capacity(CHUNK.min(streams.len()));
        for (first, chunk) in streams.chunks(CHUNK).enumerate() {
            buf.clear();
            placed.clear();
            {
                let st = self.lock()?;
                for (i, stream) in chunk.iter().enumerate() {
                    let state_start = buf.len();
                    let Some(partition) = state_into(&st, stream, &mut buf)? else { continue };
                    let state = state_start..buf.len();
                    let key_start = buf.len();
                    stream_key_into(&mut buf, &stream.0, &stream.1);
                    let key = key_start..buf.len();
                    let value = if gapped.contains(stream) {
                        None
                    } else {
                        let value_start = buf.len();
                        stream_record_into(&mut buf, partition, state.clone());
                        Some(value_start..buf.len())
                    };
                    placed.push(Placed { partition, key, value, state, stream: first * CHUNK + i });
                }
            }
            for p in &placed {
                let key = PyBytes::new(py, &buf[p.key.clone()]);
                match &p.value {
                    Some(value) => written.append((p.partition, key, PyBytes::new(py, &buf[value.clone()])))?,
                    None => {
                        let index = written.len();
                        written.append((p.partition, key, &empty))?;
                        let (session, producer) = &streams[p.stream];
                        let stream = PyTuple::new(py, [session, producer])?;
                        gapped_out.append((index, stream, p.partition, PyBytes::new(py, &buf[p.state.clone()])))?;
                    }
                }
            }
        }
        Ok((written, gapped_out))
    }
}

/// The stream's state in the tracker's own format, wherever it is held, added to `out`;
/// its partition (None: not held, nothing added).
fn state_into(st: &State, stream: &StreamKey, out: &mut Vec<u8>) -> PyResult<Option<Option<i64>>> {
    let view: &dyn StreamKeyView = stream;
    if let Some(s) = st.streams.peek(view) {
        s.write_into(out);
        return Ok(Some(s.partition));
    }
    match &st.spill {
        Some(spill) => spill.state_into(stream, out),
        None => Ok(None),
    }
}

/// `stream_key`: `stream:["<session>", "<producer>"]`, each text as json's
/// `encode_basestring_ascii` writes it.
pub(crate) fn stream_key_into(out: &mut Vec<u8>, session: &str, producer: &str) {
    out.extend_from_slice(STREAM_KEY.as_bytes());
    out.push(b'[');
    json_ascii(out, session);
    out.extend_from_slice(b", ");
    json_ascii(out, producer);
    out.push(b']');
}

/// `stream_record` of a stream without open gaps: `{"p": <partition or null>, "s": "<base64>"}`
/// (what `json.dumps` writes for that dict), added to `out`, where `state` already lies.
pub(crate) fn stream_record_into(out: &mut Vec<u8>, partition: Option<i64>, state: std::ops::Range<usize>) {
    out.extend_from_slice(b"{\"p\": ");
    match partition {
        Some(p) => out.extend_from_slice(p.to_string().as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"s\": \"");
    base64_into(out, state);
    out.extend_from_slice(b"\"}");
}

/// A JSON string as `json.encoder.encode_basestring_ascii` writes it: printable ASCII as
/// is but for `"` and `\`, the short escapes, any other character as `\uXXXX` (lower-case
/// hex; beyond the BMP a surrogate pair).
pub(crate) fn json_ascii(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let unit = |out: &mut Vec<u8>, u: u32| {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[((u >> shift) & 0xf) as usize]);
        }
    };
    out.push(b'"');
    for c in text.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            ' '..='~' => out.push(c as u8),
            _ => {
                let u = c as u32;
                if u >= 0x10000 {
                    let v = u - 0x10000;
                    unit(out, 0xd800 | (v >> 10));
                    unit(out, 0xdc00 | (v & 0x3ff));
                } else {
                    unit(out, u);
                }
            }
        }
    }
    out.push(b'"');
}

/// Standard base64 with padding (`base64.b64encode`) of `out[bytes]`, added to `out`.
pub(crate) fn base64_into(out: &mut Vec<u8>, bytes: std::ops::Range<usize>) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    out.reserve(bytes.len().div_ceil(3) * 4);
    let whole = bytes.start + (bytes.len() / 3) * 3;
    for at in (bytes.start..whole).step_by(3) {
        let c = [out[at], out[at + 1], out[at + 2]];
        let n = (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
        out.extend_from_slice(&[
            ALPHABET[(n >> 18) as usize & 63],
            ALPHABET[(n >> 12) as usize & 63],
            ALPHABET[(n >> 6) as usize & 63],
            ALPHABET[n as usize & 63],
        ]);
    }
    // The last one or two bytes, read before the digits written after them.
    let (a, b) = (out.get(whole).copied().unwrap_or(0), out.get(whole + 1).copied().unwrap_or(0));
    match bytes.end - whole {
        1 => {
            let n = u32::from(a) << 16;
            out.extend_from_slice(&[ALPHABET[(n >> 18) as usize & 63], ALPHABET[(n >> 12) as usize & 63], b'=', b'=']);
        }
        2 => {
            let n = (u32::from(a) << 16) | (u32::from(b) << 8);
            out.extend_from_slice(&[
                ALPHABET[(n >> 18) as usize & 63],
                ALPHABET[(n >> 12) as usize & 63],
                ALPHABET[(n >> 6) as usize & 63],
                b'=',
            ]);
        }
        _ => {}
    }
}

/// `checkpoint_records` for Python: (the records, in order; the gapped streams as
/// (their index in the records, stream, partition, state), their record a placeholder
/// the caller replaces).
pub(crate) type CheckpointOut<'py> = (Bound<'py, PyList>, Bound<'py, PyList>);
