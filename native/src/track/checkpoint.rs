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

/// One stream's record, or its state for Python to write (the stream has open gaps).
pub(crate) enum StreamRecord {
    Written { partition: Option<i64>, key: Vec<u8>, value: Vec<u8> },
    Gapped { partition: Option<i64>, key: Vec<u8>, stream: StreamKey, state: Vec<u8> },
}

impl NativeStreamTracker {
    /// The records of the streams placed into since the last call (taken from the
    /// tracker's dirty set) and of `extra`, sorted by (session, producer) as Python sorts
    /// them (UTF-8 byte order is code point order), each once; a stream no longer held
    /// is left out. Streams in `gapped` come back as `Gapped`.
    pub(crate) fn checkpoint_records(&self, extra: Vec<StreamKey>, gapped: &FastSet<StreamKey>) -> PyResult<Vec<StreamRecord>> {
        let mut st = self.lock()?;
        let mut streams: Vec<StreamKey> = st.take_dirty();
        streams.extend(extra);
        streams.sort_unstable();
        streams.dedup();
        let mut out = Vec::with_capacity(streams.len());
        for stream in streams {
            let Some((partition, state)) = state_of(&st, &stream)? else { continue };
            let key = stream_key(&stream.0, &stream.1);
            if gapped.contains(&stream) {
                out.push(StreamRecord::Gapped { partition, key, stream, state });
            } else {
                out.push(StreamRecord::Written { partition, key, value: stream_record(partition, &state) });
            }
        }
        Ok(out)
    }
}

/// The stream's partition and state in the tracker's own format, wherever it is held.
fn state_of(st: &State, stream: &StreamKey) -> PyResult<Option<(Option<i64>, Vec<u8>)>> {
    let view: &dyn StreamKeyView = stream;
    let mut state = Vec::new();
    if let Some(s) = st.streams.peek(view) {
        s.write_into(&mut state);
        return Ok(Some((s.partition, state)));
    }
    Ok(st.peek(stream)?.map(|s| {
        s.write_into(&mut state);
        (s.partition, state)
    }))
}

/// `stream_key`: `stream:["<session>", "<producer>"]`, each text as json's
/// `encode_basestring_ascii` writes it.
pub(crate) fn stream_key(session: &str, producer: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(STREAM_KEY.len() + session.len() + producer.len() + 8);
    out.extend_from_slice(STREAM_KEY.as_bytes());
    out.push(b'[');
    json_ascii(&mut out, session);
    out.extend_from_slice(b", ");
    json_ascii(&mut out, producer);
    out.push(b']');
    out
}

/// `stream_record` of a stream without open gaps: `{"p": <partition or null>, "s": "<base64>"}`
/// (what `json.dumps` writes for that dict).
pub(crate) fn stream_record(partition: Option<i64>, state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(state.len().div_ceil(3) * 4 + 32);
    out.extend_from_slice(b"{\"p\": ");
    match partition {
        Some(p) => out.extend_from_slice(p.to_string().as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"s\": \"");
    base64_into(&mut out, state);
    out.extend_from_slice(b"\"}");
    out
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

/// Standard base64 with padding (`base64.b64encode`).
pub(crate) fn base64_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut chunks = bytes.chunks_exact(3);
    for c in &mut chunks {
        let n = (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
        out.extend_from_slice(&[
            ALPHABET[(n >> 18) as usize & 63],
            ALPHABET[(n >> 12) as usize & 63],
            ALPHABET[(n >> 6) as usize & 63],
            ALPHABET[n as usize & 63],
        ]);
    }
    match *chunks.remainder() {
        [a] => {
            let n = u32::from(a) << 16;
            out.extend_from_slice(&[ALPHABET[(n >> 18) as usize & 63], ALPHABET[(n >> 12) as usize & 63], b'=', b'=']);
        }
        [a, b] => {
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

pub(crate) fn checkpoint_out<'py>(py: Python<'py>, records: Vec<StreamRecord>) -> PyResult<CheckpointOut<'py>> {
    let written = PyList::empty(py);
    let gapped = PyList::empty(py);
    let empty = PyBytes::new(py, b"");
    for (index, record) in records.into_iter().enumerate() {
        match record {
            StreamRecord::Written { partition, key, value } => {
                written.append((partition, PyBytes::new(py, &key), PyBytes::new(py, &value)))?;
            }
            StreamRecord::Gapped { partition, key, stream, state } => {
                written.append((partition, PyBytes::new(py, &key), &empty))?;
                let stream = PyTuple::new(py, [stream.0, stream.1])?;
                gapped.append((index, stream, partition, PyBytes::new(py, &state)))?;
            }
        }
    }
    Ok((written, gapped))
}
