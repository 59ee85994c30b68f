//! `verify --follow`'s admission of a batch (`follow_batch`): a message at an offset its
//! partition was proved to already is read again (counted, not verified); the others go
//! on to the step, each moving its partition's next offset and latest event time. One
//! native pass, where Python asked each message its partition, offset and timestamp.

use pyo3::exceptions::PyKeyError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::hashing::FastMap;

/// What admitting read of one message: its partition, offset and broker timestamp, and
/// which object it was (its address, while the admitted list holds it).
#[derive(Clone, Copy)]
pub(crate) struct Read {
    pub(crate) message: usize,
    pub(crate) partition: i64,
    pub(crate) offset: i64,
    pub(crate) timestamp: i64,
}

/// One partition's share of a batch: its next offset after it, its latest timestamp
/// (None: no message admitted), messages admitted, messages read again.
pub(crate) type Admitted = (i64, Option<i64>, u64, u64);

/// The messages of `batch` past their partition's `next_offsets` entry, in order, and
/// per partition met what `Admitted` says. A partition missing from `next_offsets` is a
/// KeyError, as the follower's own table lookup was.
///
/// `read`, when given, gets what was read of each admitted message, in the order of the
/// returned list (verify's step then asks the messages no second time). `known`, when
/// given, is what `positions` read of `batch`'s messages, by index: a message still the
/// same object is not asked again.
pub(crate) fn admit<'py>(
    batch: &Bound<'py, PyList>,
    next_offsets: &Bound<'py, PyDict>,
    mut read: Option<&mut Vec<Read>>,
    known: Option<&[Read]>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
    let py = batch.py();
    let live = PyList::empty(py);
    let mut parts: FastMap<i64, Admitted> = FastMap::default();
    for (index, msg) in batch.iter().enumerate() {
        let known = known.and_then(|k| k.get(index)).filter(|k| k.message == msg.as_ptr() as usize);
        // `msg.partition() or 0`, `msg.offset() or 0`
        let (partition, offset) = match known {
            Some(k) => (k.partition, k.offset),
            None => (
                msg.call_method0(intern!(py, "partition"))?.extract::<Option<i64>>()?.unwrap_or(0),
                msg.call_method0(intern!(py, "offset"))?.extract::<Option<i64>>()?.unwrap_or(0),
            ),
        };
        let part = match parts.get_mut(&partition) {
            Some(part) => part,
            None => {
                let Some(next) = next_offsets.get_item(partition)? else {
                    return Err(PyKeyError::new_err(partition));
                };
                parts.entry(partition).or_insert((next.extract()?, None, 0, 0))
            }
        };
        if offset < part.0 {
            part.3 += 1;
            continue;
        }
        part.0 = offset + 1;
        let stamp: i64 = match known {
            Some(k) => k.timestamp,
            None => msg.call_method0(intern!(py, "timestamp"))?.get_item(1)?.extract()?,
        };
        part.1 = Some(part.1.map_or(stamp, |t| t.max(stamp)));
        part.2 += 1;
        if let Some(read) = read.as_deref_mut() {
            read.push(Read { message: msg.as_ptr() as usize, partition, offset, timestamp: stamp });
        }
        live.append(msg)?;
    }
    let out = PyDict::new(py);
    for (partition, part) in parts {
        out.set_item(partition, part)?;
    }
    Ok((live, out))
}

/// Per partition met by `positions`: its first message's offset, and the offset after its
/// last message's.
pub(crate) type Met = (i64, i64);

/// `verify --follow`'s examination of a consumed batch (`FollowValidation.examine_batch`),
/// one native pass: the messages that have a partition and an offset (librdkafka's error
/// events have neither), in order, and per partition, in the order first met, what `Met`
/// says. Into `read`, by index into the returned list, what was read of each message
/// (the message's address 0 where its timestamp is not an int: `admit` asks it again).
pub(crate) fn positions<'py>(records: &Bound<'py, PyAny>, read: &mut Vec<Read>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
    let py = records.py();
    let placed = PyList::empty(py);
    let mut order: Vec<(i64, Met)> = Vec::new();
    let mut at: FastMap<i64, usize> = FastMap::default();
    for msg in records.try_iter()? {
        let msg = msg?;
        let partition: Option<i64> = msg.call_method0(intern!(py, "partition"))?.extract()?;
        let offset: Option<i64> = msg.call_method0(intern!(py, "offset"))?.extract()?;
        let (Some(partition), Some(offset)) = (partition, offset) else { continue };
        match at.get(&partition) {
            Some(&i) => order[i].1 .1 = offset + 1,
            None => {
                at.insert(partition, order.len());
                order.push((partition, (offset, offset + 1)));
            }
        }
        let timestamp: Option<i64> = msg.call_method0(intern!(py, "timestamp"))?.get_item(1)?.extract().ok();
        let message = if timestamp.is_some() { msg.as_ptr() as usize } else { 0 };
        read.push(Read { message, partition, offset, timestamp: timestamp.unwrap_or(0) });
        placed.append(msg)?;
    }
    let met = PyDict::new(py);
    for (partition, m) in order {
        met.set_item(partition, m)?;
    }
    Ok((placed, met))
}
