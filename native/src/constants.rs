//! The bytes both languages read and write, once for the crate: the chain's domain tags
//! and the framing headers. Python's own copies (`turnaudit.chain`,
//! `turnaudit.serialization.framing`) are held equal to these by a test that reads them
//! from the built module (`_native.CHAIN_DOMAIN` and the rest).

/// The chain rule's domains (`turnaudit.chain`): turns of the TurnEvent v1..v4 writer
/// schemas hash the v1 domain and the body; every other writer schema (v5 on) hashes
/// the v2 domain, its 8-byte fingerprint and the body.
pub(crate) const CHAIN_DOMAIN: &[u8] = b"turnaudit.chain.v1\x00";
pub(crate) const SCHEMA_CHAIN_DOMAIN: &[u8] = b"turnaudit.chain.v2\x00";

/// The fingerprints of the TurnEvent v1..v4 writer schemas (hashed by the v1 rule).
pub(crate) const LEGACY_CHAIN_FINGERPRINTS: [[u8; 8]; 4] = [
    [0x87, 0x71, 0x48, 0xbd, 0x22, 0xbe, 0xe4, 0xa2],
    [0x2b, 0xe4, 0x25, 0x53, 0xfb, 0xf6, 0x66, 0x11],
    [0x27, 0x6b, 0xa4, 0xd9, 0x00, 0xc0, 0x85, 0x46],
    [0x47, 0x33, 0x56, 0xc1, 0xb8, 0x59, 0xa1, 0xbc],
];

/// The `prev_hash` of a stream's position 0.
pub(crate) const GENESIS_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Avro single-object framing: two magic bytes, then the writer schema's fingerprint.
pub(crate) const SINGLE_OBJECT_MAGIC: [u8; 2] = [0xC3, 0x01];
pub(crate) const SINGLE_OBJECT_HEADER: usize = 10;

/// Confluent framing: a zero byte, then the registry's 4-byte schema id.
pub(crate) const CONFLUENT_MAGIC: [u8; 1] = [0];
pub(crate) const CONFLUENT_HEADER: usize = 5;

/// Where a framed message's body starts (`framing.body_start`): after a single-object
/// header, after a Confluent header, or at 0 for a bare body.
pub(crate) fn body_start(value: &[u8]) -> usize {
    if value.starts_with(&SINGLE_OBJECT_MAGIC) {
        SINGLE_OBJECT_HEADER
    } else if value.starts_with(&CONFLUENT_MAGIC) {
        CONFLUENT_HEADER
    } else {
        0
    }
}

/// The writer schema fingerprint of a single-object message's header, if it has one.
pub(crate) fn single_object_fingerprint(value: &[u8]) -> Option<[u8; 8]> {
    if value.starts_with(&SINGLE_OBJECT_MAGIC) && value.len() >= SINGLE_OBJECT_HEADER {
        return Some(value[2..SINGLE_OBJECT_HEADER].try_into().expect("8 bytes"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_start_follows_each_framing() {
        assert_eq!(body_start(b"\xc3\x01abcdefgh body"), SINGLE_OBJECT_HEADER);
        assert_eq!(body_start(b"\x00\x00\x00\x00\x07body"), CONFLUENT_HEADER);
        assert_eq!(body_start(b"\x02body"), 0);
        assert_eq!(body_start(b""), 0);
        // A lone first magic byte is a bare body, not a header.
        assert_eq!(body_start(b"\xc3\x02"), 0);
    }

    #[test]
    fn fingerprint_is_read_only_from_a_whole_single_object_header() {
        let mut value = SINGLE_OBJECT_MAGIC.to_vec();
        value.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(single_object_fingerprint(&value), Some([1, 2, 3, 4, 5, 6, 7, 8]));
        assert_eq!(single_object_fingerprint(&value[..9]), None);
        assert_eq!(single_object_fingerprint(b"\x00\x00\x00\x00\x01\x02"), None);
    }

    #[test]
    fn genesis_is_64_zero_digits() {
        assert_eq!(GENESIS_HEX.len(), 64);
        assert!(GENESIS_HEX.bytes().all(|b| b == b'0'));
    }
}
