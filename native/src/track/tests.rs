//! The tracker's pure parts: the chain rule, the state encoding, a stream's tables and
//! gaps, the chain check, the Bloom filter. No Python: none of these touch an object.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

use super::chain::{chain_digest, head16, hex_is, hex_of, Hash32};
use super::codec::{StateReader, StateWriter};
use super::stream::{Prev, Stream, StreamKey};
use super::tracker::NativeStreamTracker;
use crate::bloom::BloomFilter;
use crate::constants::{CHAIN_DOMAIN, GENESIS_HEX, LEGACY_CHAIN_FINGERPRINTS, SCHEMA_CHAIN_DOMAIN};

fn sha(parts: &[&[u8]]) -> Hash32 {
    let mut h = Sha256::new();
    parts.iter().for_each(|p| h.update(p));
    h.finalize().into()
}

/// A small deterministic generator (xorshift): many inputs without a crate for it.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = (self.next() % (max as u64 + 1)) as usize;
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn chain_digest_matches_independently_computed_vectors() {
    // hashlib.sha256(b"turnaudit.chain.v1\0" + b"body") and the v2 rule with fingerprint 1..8.
    let v1 = "2d2f310eafb9f27a048309785f3f72874faca77f2809cf00798ed023b4ea531d";
    let v2 = "cf809f5c4d00d900a6dda4e3bd1d720faecfac9d70da39ec39ecce7f50b799d3";
    assert_eq!(hex_of(&chain_digest(b"body", None)), v1);
    assert_eq!(hex_of(&chain_digest(b"\x00\x00\x00\x00\x01body", None)), v1);
    let mut framed = vec![0xc3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8];
    framed.extend_from_slice(b"body");
    assert_eq!(hex_of(&chain_digest(&framed, None)), v2);
}

#[test]
fn chain_digest_hashes_each_framing_by_its_rule() {
    let mut draw = Draw(0x9e37_79b9_7f4a_7c15);
    for _ in 0..500 {
        let body = draw.bytes(64);
        let fp: [u8; 8] = draw.next().to_le_bytes();
        // Bare and Confluent bodies: the v1 rule over the body alone.
        let mut bare = body.clone();
        if bare.first() == Some(&0) || bare.starts_with(&[0xc3, 0x01]) {
            bare.insert(0, 7);
        }
        assert_eq!(chain_digest(&bare, None), sha(&[CHAIN_DOMAIN, &bare]));
        let confluent = [&[0u8, 0, 0, 0, 9][..], &body].concat();
        assert_eq!(chain_digest(&confluent, None), sha(&[CHAIN_DOMAIN, &body]));
        // Single object: the header's fingerprint, unless one is given; legacy ones by v1.
        let single = [&[0xc3u8, 0x01][..], &fp, &body].concat();
        assert_eq!(chain_digest(&single, None), sha(&[SCHEMA_CHAIN_DOMAIN, &fp, &body]));
        let given: [u8; 8] = draw.next().to_le_bytes();
        assert_eq!(chain_digest(&single, Some(&given)), sha(&[SCHEMA_CHAIN_DOMAIN, &given, &body]));
        for legacy in &LEGACY_CHAIN_FINGERPRINTS {
            let old = [&[0xc3u8, 0x01][..], legacy, &body].concat();
            assert_eq!(chain_digest(&old, None), sha(&[CHAIN_DOMAIN, &body]));
            assert_eq!(chain_digest(&single, Some(legacy)), sha(&[CHAIN_DOMAIN, &body]));
        }
    }
    // A header cut short: no fingerprint, nothing of the value hashed past its end.
    assert_eq!(chain_digest(b"\xc3\x01abc", None), sha(&[CHAIN_DOMAIN]));
}

#[test]
fn hex_forms_agree_with_each_other() {
    let mut draw = Draw(77);
    for _ in 0..200 {
        let hash: Hash32 = sha(&[&draw.bytes(16)]);
        let hex = hex_of(&hash);
        assert_eq!(hex.len(), 64);
        assert!(hex_is(&hash, &hex));
        assert!(!hex_is(&hash, &hex.to_uppercase()) || !hex.bytes().any(|b| b.is_ascii_alphabetic()));
        assert!(!hex_is(&hash, &hex[..63]));
        let mut other = hex.clone().into_bytes();
        other[5] = if other[5] == b'0' { b'1' } else { b'0' };
        assert!(!hex_is(&hash, std::str::from_utf8(&other).unwrap()));
        assert_eq!(&head16(&hash)[..], &hex.as_bytes()[..16]);
    }
}

#[test]
fn state_codec_reads_back_what_it_wrote_and_refuses_a_cut() {
    let mut w = StateWriter(Vec::new());
    w.u64(u64::MAX);
    w.i128(i128::MIN);
    w.text("séance ✓");
    w.opt(None);
    w.opt(Some(-5));
    let bytes = w.0;
    let mut r = StateReader { buf: &bytes, pos: 0 };
    assert_eq!(r.u64().unwrap(), u64::MAX);
    assert_eq!(r.i128().unwrap(), i128::MIN);
    assert_eq!(r.text().unwrap(), "séance ✓");
    assert_eq!(r.opt().unwrap(), None);
    assert_eq!(r.opt().unwrap(), Some(-5));
    assert_eq!(r.pos, bytes.len());
    for cut in 0..bytes.len() {
        let mut r = StateReader { buf: &bytes[..cut], pos: 0 };
        let read_all = (|| {
            r.u64()?;
            r.i128()?;
            r.text()?;
            r.opt()?;
            r.opt()
        })();
        assert!(read_all.is_err(), "cut at {cut} read as whole");
    }
}

/// A stream with a gap, own hashes at several positions and claims of both kinds.
fn busy_stream(draw: &mut Draw) -> Stream {
    let mut s = Stream { partition: Some((draw.next() % 9) as i64), ..Stream::default() };
    let next = 5 + (draw.next() % 50) as i128;
    s.open_gap(1, next - 1, 1 + (draw.next() % 20) as i128);
    s.next = next;
    for p in [next - 1, 0, next / 2] {
        s.own.insert(p, sha(&[&p.to_le_bytes()]));
    }
    s.claimed.insert(next / 3, Prev::Text(hex_of(&sha(&[b"x"]))));
    s.claimed.insert(next / 4 + 100, Prev::Other);
    s
}

fn encoded(s: &Stream) -> Vec<u8> {
    let mut out = Vec::new();
    s.write_into(&mut out);
    out
}

#[test]
fn a_stream_encodes_to_bytes_that_decode_to_the_same_encoding() {
    let mut draw = Draw(5);
    for _ in 0..200 {
        let s = busy_stream(&mut draw);
        let bytes = encoded(&s);
        let back = Stream::from_bytes(&bytes).expect("its own encoding");
        assert_eq!(encoded(&back), bytes);
        assert_eq!(back.next, s.next);
        assert_eq!(back.partition, s.partition);
        assert_eq!(back.untracked_missing, s.untracked_missing);
        assert_eq!(back.missing.iter().collect::<HashSet<_>>(), s.missing.iter().collect::<HashSet<_>>());
        assert_eq!(back.head().map(|(p, h)| (p, *h)), s.head().map(|(p, h)| (p, *h)));
        // Trailing bytes and every cut refused.
        assert!(Stream::from_bytes(&[bytes.as_slice(), &[0]].concat()).is_err());
        assert!(Stream::from_bytes(&bytes[..bytes.len() - 1]).is_err());
    }
}

#[test]
fn one_stream_has_one_encoding_whatever_order_its_tables_filled_in() {
    let mut a = Stream { next: 40, ..Stream::default() };
    let mut b = a.clone();
    let positions: Vec<i128> = (0..30).map(|i| (i * 7) % 31).collect();
    for p in &positions {
        a.own.insert(*p, sha(&[&p.to_le_bytes()]));
        a.missing.insert(*p + 100);
        a.claimed.insert(*p, Prev::Other);
    }
    for p in positions.iter().rev() {
        b.claimed.insert(*p, Prev::Other);
        b.missing.insert(*p + 100);
        b.own.insert(*p, sha(&[&p.to_le_bytes()]));
    }
    assert_eq!(encoded(&a), encoded(&b));
}

#[test]
fn a_gap_tracks_positions_up_to_the_bound_and_counts_the_rest() {
    for (start, end, bound, before) in [(0, 10, 100, 0), (3, 10, 4, 0), (0, 10, 5, 5), (5, 5, 10, 0), (9, 2, 10, 0)] {
        let mut s = Stream::default();
        for p in 0..before {
            s.missing.insert(1000 + p);
        }
        let (skipped, tracked) = s.open_gap(start, end, bound);
        let expect_skipped = (end - start).max(0);
        let expect_tracked = expect_skipped.min((bound - before).max(0));
        assert_eq!((skipped, tracked), (expect_skipped, expect_tracked));
        assert_eq!(s.missing_len() as i128, before + tracked);
        assert_eq!(s.untracked_missing, skipped - tracked);
        assert!((start..start + tracked).all(|p| s.missing.contains(&p)));
        assert_eq!(s.is_gappy(), before + skipped > 0);
    }
}

#[test]
fn a_late_position_closes_its_gap_and_the_table_goes_when_empty() {
    let mut s = Stream::default();
    s.open_gap(0, 3, 10);
    assert!(s.missing.remove(&1));
    assert!(!s.missing.remove(&1));
    assert!(s.missing.remove(&0) && s.missing.remove(&2));
    assert!(s.missing.0.is_none(), "no table left for a stream without a gap");
}

fn key() -> StreamKey {
    ("session".to_owned(), "producer".to_owned())
}

#[test]
fn the_chain_check_finds_each_broken_link() {
    let h = |p: i128| sha(&[&p.to_le_bytes()]);
    let mut s = Stream::default();
    // Position 0 must name genesis.
    assert!(NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Text(GENESIS_HEX.into()), &h(0), 0).is_none());
    let wrong = NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Text("ab".into()), &h(0), 0).unwrap();
    assert!(wrong.contains("position 0 does not start the chain"), "{wrong}");
    assert!(wrong.starts_with("session session / producer producer, position 0: "), "{wrong}");
    // The next position must name its predecessor's hash.
    s.own.insert(0, h(0));
    s.next = 1;
    assert!(NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Text(hex_of(&h(0))), &h(1), 1).is_none());
    let wrong = NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Other, &h(1), 1).unwrap();
    assert!(wrong.contains("prev_hash does not match position 0's hash"), "{wrong}");
    // Past a gap, the claim waits for the missing predecessor, which must match it.
    assert!(NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Text(hex_of(&h(4))), &h(5), 5).is_none());
    assert!(NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Text(GENESIS_HEX.into()), &h(4), 4).is_none());
    assert!(NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Text(hex_of(&h(8))), &h(9), 9).is_none());
    let wrong = NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Text(GENESIS_HEX.into()), &h(7), 8).unwrap();
    assert!(wrong.contains("position 9 names another predecessor hash"), "{wrong}");
    // A late arrival whose predecessor is still missing claims it too.
    let mut s = Stream { next: 5, ..Stream::default() };
    s.open_gap(1, 4, 10);
    assert!(NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Text(hex_of(&h(2))), &h(3), 3).is_none());
    s.missing.remove(&3);
    let wrong = NativeStreamTracker::check_chain(&mut s, &key(), &Prev::Other, &h(20), 2).unwrap();
    assert!(wrong.contains("position 3 names another predecessor hash"), "{wrong}");
}

#[test]
fn the_bloom_filter_holds_every_string_added() {
    let mut f = BloomFilter::with_bits(1 << 16);
    let added: Vec<String> = (0..2000).map(|i| format!("event-{i}")).collect();
    added.iter().for_each(|s| f.insert(s.as_str()));
    assert!(added.iter().all(|s| f.holds(s.as_str())));
    let false_hits = (0..2000).filter(|i| f.holds(format!("other-{i}").as_str())).count();
    assert!(false_hits < 400, "{false_hits} of 2000 never added said held");
    assert!(!BloomFilter::with_bits(1 << 16).holds("anything"));
}
