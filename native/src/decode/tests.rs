//! The body reader's pure parts: varints as fastavro reads them, Python-style indexes,
//! and their refusals (the encoder's writing read back is in `encode`'s tests).

use super::body::{py_index, Body, Fail};

fn read_long(bytes: &[u8]) -> Result<(i64, usize), String> {
    let mut body = Body { buf: bytes, pos: 0 };
    match body.long() {
        Ok(v) => Ok((v, body.pos)),
        Err(Fail::Eof(what, at)) => Err(format!("eof {what} {at}")),
        Err(_) => Err("other".into()),
    }
}

#[test]
fn a_long_is_zigzag_and_an_over_long_one_folds_as_fastavro_does() {
    assert_eq!(read_long(&[0x00]), Ok((0, 1)));
    assert_eq!(read_long(&[0x01]), Ok((-1, 1)));
    assert_eq!(read_long(&[0x02]), Ok((1, 1)));
    assert_eq!(read_long(&[0x80, 0x01]), Ok((64, 2)));
    // Eleven bytes: the eleventh's bits land at shift 70 % 64 = 6.
    let mut over = vec![0x80; 10];
    over.push(0x01);
    assert_eq!(read_long(&over), Ok((32, 11)));
}

#[test]
fn an_index_is_python_list_indexing() {
    for len in 0..6usize {
        for index in -8i64..8 {
            let python = if index < 0 { index + len as i64 } else { index };
            let expected = (0..len as i64).contains(&python).then_some(python as usize);
            assert_eq!(py_index(index, len, "branch").ok(), expected, "{index} of {len}");
        }
    }
    assert!(py_index(i64::MIN, 3, "branch").is_err());
}
