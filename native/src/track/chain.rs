//! The chain rule (`turnaudit.chain`): a framed message's content hash under its writer
//! schema's fingerprint, and the hex forms the tracker compares `prev_hash` with.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sha2::{Digest, Sha256};

use crate::constants::{body_start, single_object_fingerprint, CHAIN_DOMAIN, LEGACY_CHAIN_FINGERPRINTS, SCHEMA_CHAIN_DOMAIN};

pub(crate) type Hash32 = [u8; 32];
/// The hex digits of a content hash an event id's entry keeps.
pub(crate) const SEEN_DIGITS: usize = 16;

/// The chain hash of a framed message under its writer schema's fingerprint
/// (`fingerprint`, else the single-object header's; none: an unframed or Confluent
/// message whose schema was not resolved, hashed by the v1 rule).
pub(crate) fn chain_digest(value: &[u8], fingerprint: Option<&[u8; 8]>) -> Hash32 {
    let fp = fingerprint.copied().or(single_object_fingerprint(value));
    let mut h = Sha256::new();
    match fp {
        Some(fp) if !LEGACY_CHAIN_FINGERPRINTS.contains(&fp) => {
            h.update(SCHEMA_CHAIN_DOMAIN);
            h.update(fp);
        }
        _ => h.update(CHAIN_DOMAIN),
    }
    h.update(&value[body_start(value).min(value.len())..]);
    h.finalize().into()
}

/// An optional 8-byte fingerprint from Python (`None` or bytes).
pub(crate) fn fingerprint_arg(fingerprint: Option<&[u8]>) -> PyResult<Option<[u8; 8]>> {
    fingerprint
        .map(|f| f.try_into().map_err(|_| PyValueError::new_err("a writer schema fingerprint is 8 bytes")))
        .transpose()
}

const HEX: &[u8; 16] = b"0123456789abcdef";

pub(crate) fn hex_of(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// Whether `text` is exactly the lowercase hex of `hash` (what `hexdigest` gives).
pub(crate) fn hex_is(hash: &Hash32, text: &str) -> bool {
    let t = text.as_bytes();
    t.len() == 64
        && hash.iter().enumerate().all(|(i, b)| {
            t[2 * i] == HEX[(b >> 4) as usize] && t[2 * i + 1] == HEX[(b & 15) as usize]
        })
}

pub(crate) fn head16(hash: &Hash32) -> [u8; SEEN_DIGITS] {
    let mut out = [0u8; SEEN_DIGITS];
    for (i, b) in hash[..SEEN_DIGITS / 2].iter().enumerate() {
        out[2 * i] = HEX[(b >> 4) as usize];
        out[2 * i + 1] = HEX[(b & 15) as usize];
    }
    out
}

/// `chain_hash`'s hex digest, natively (for tests and the Python side alike).
#[pyfunction]
#[pyo3(signature = (value, fingerprint = None))]
pub(crate) fn chain_hash_hex(value: &[u8], fingerprint: Option<&[u8]>) -> PyResult<String> {
    Ok(hex_of(&chain_digest(value, fingerprint_arg(fingerprint)?.as_ref())))
}
