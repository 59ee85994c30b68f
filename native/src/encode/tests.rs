//! The encoder's writing read back by the decoder's body reader: every long, cut
//! anywhere, and a sized slice refused past its end. (Here, not in `decode`: the
//! encoder sits above the decoder it compiles schemas with.)

use crate::decode::{Body, Fail};

fn read_long(bytes: &[u8]) -> Result<(i64, usize), String> {
    let mut body = Body { buf: bytes, pos: 0 };
    match body.long() {
        Ok(v) => Ok((v, body.pos)),
        Err(Fail::Eof(what, at)) => Err(format!("eof {what} {at}")),
        Err(_) => Err("other".into()),
    }
}

#[test]
fn every_long_the_encoder_writes_reads_back_whole() {
    let mut values = vec![0, 1, -1, 63, -64, 64, -65, i64::MAX, i64::MIN, i32::MAX as i64, i32::MIN as i64];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..5000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        values.push((x as i64) >> (x % 64));
    }
    for v in values {
        let mut out = Vec::new();
        super::long(&mut out, v);
        assert!(out.len() <= 10);
        assert_eq!(read_long(&out), Ok((v, out.len())), "{v}");
        // Cut anywhere, the input ends first.
        for cut in 0..out.len() {
            assert!(read_long(&out[..cut]).unwrap_err().starts_with("eof long"));
        }
    }
}

#[test]
fn a_sized_slice_is_refused_past_the_end_or_negative() {
    let mut out = Vec::new();
    super::sized(&mut out, b"hello");
    let mut body = Body { buf: &out, pos: 0 };
    assert!(matches!(body.sized("string"), Ok(b"hello")));
    assert_eq!(body.pos, out.len());
    for bad in [&out[..out.len() - 1], &[0x01][..], &[0x14, b'a'][..]] {
        let mut body = Body { buf: bad, pos: 0 };
        match body.sized("string") {
            Err(Fail::Msg(m)) => assert!(m.starts_with("string of "), "{m}"),
            _ => panic!("{bad:?} read as a string"),
        }
    }
}
