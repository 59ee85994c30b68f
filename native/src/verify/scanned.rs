//! What both native batch steps (verify's `VerifyStep`, the consumer services'
//! `ConsumeStep`) share: the shipped writer schemas they scan, the fields the stream
//! tracker reads off a scanned record, and texts numbered for a batch's tally.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use super::contracts::{slot, BREACHES, EVENT_ID, PREV_HASH, PRODUCER_ID, SEQUENCE, SESSION_ID, SLOTS};
use crate::constants::{SINGLE_OBJECT_HEADER as HEADER, SINGLE_OBJECT_MAGIC as MAGIC};
use crate::decode::scan::{scan, Names, V};
use crate::decode::Decoder;
use crate::hashing::FastMap;

/// A shipped writer schema a step reads without building records (`scan`): one whose
/// writer has every field the steps read (or lacks only `breaches`, filled with an empty
/// default). Its compiled decoder, and how it is scanned.
pub(crate) struct Shipped {
    pub(crate) decoder: Py<Decoder>,
    pub(crate) scan: Scanning,
}

pub(crate) struct Scanning {
    pub(crate) names: Names,
    pub(crate) wanted: Vec<Option<usize>>,
    pub(crate) version: i64,
}

/// (fingerprint, decoder, version, shared defaults, copied defaults), as
/// `TurnEventDeserializer.native_plans` gives them.
pub(crate) type ShippedPlan = (Vec<u8>, Py<Decoder>, Py<PyAny>, Py<PyDict>, Vec<(Py<PyString>, Py<PyAny>)>);

/// The scanned schemas by single-object fingerprint.
pub(crate) struct Plans(HashMap<[u8; 8], Arc<Shipped>>);

impl Plans {
    pub(crate) fn new(py: Python<'_>, shipped: Vec<ShippedPlan>) -> PyResult<Self> {
        let mut plans = HashMap::new();
        for (fingerprint, decoder, version, fill_shared, fill_copied) in shipped {
            let fingerprint: [u8; 8] = fingerprint
                .as_slice()
                .try_into()
                .map_err(|_| pyo3::exceptions::PyValueError::new_err("a fingerprint is 8 bytes"))?;
            if let Some(scan) = scanning(py, &decoder, &version, &fill_shared, &fill_copied)? {
                plans.insert(fingerprint, Arc::new(Shipped { decoder, scan }));
            }
        }
        Ok(Plans(plans))
    }

    /// The plan of a single-object message's writer, if the step scans it.
    pub(crate) fn of(&self, payload: &[u8]) -> Option<Arc<Shipped>> {
        if payload.len() >= HEADER && payload[..2] == MAGIC {
            let fingerprint: [u8; 8] = payload[2..HEADER].try_into().expect("8 bytes");
            return self.0.get(&fingerprint).cloned();
        }
        None
    }

    /// Writer versions scanned without building records, ascending.
    pub(crate) fn versions(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self.0.values().map(|s| s.scan.version).collect();
        out.sort_unstable();
        out
    }
}

/// A single-object message's body scanned into the steps' slots; `None`: it would not
/// decode (the Python path says why).
pub(crate) fn scan_message<'a>(shipped: &'a Shipped, payload: &'a [u8]) -> Option<[Option<V<'a>>; SLOTS.len()]> {
    let plan = &shipped.decoder.get().plan;
    scan::<{ SLOTS.len() }>(plan, &shipped.scan.names, &shipped.scan.wanted, payload, HEADER)
}

/// The fields the tracker reads, of the kinds it takes: (session, event id, sequence,
/// producer, prev hash), `""` for a null producer or prev hash; `None` for any other kind.
pub(crate) fn track_fields<'a>(f: &'a [Option<V<'a>>]) -> Option<(&'a str, &'a str, i128, &'a str, &'a str)> {
    let (Some(V::Str(session)), Some(V::Str(event_id)), Some(V::Int(sequence))) = (&f[SESSION_ID], &f[EVENT_ID], &f[SEQUENCE]) else {
        return None;
    };
    let producer = match &f[PRODUCER_ID] {
        Some(V::Null) => "",
        Some(V::Str(p)) => p,
        _ => return None,
    };
    let prev: &str = match &f[PREV_HASH] {
        Some(V::Null) => "",
        Some(V::Str(p)) => p,
        _ => return None,
    };
    Some((session, event_id, i128::from(*sequence), producer, prev))
}

/// How a shipped schema is scanned, or `None` (the Python path decodes it): the writer
/// must have every slot's field; `breaches` alone may be missing, when its default is empty.
fn scanning(
    py: Python<'_>,
    decoder: &Py<Decoder>,
    version: &Py<PyAny>,
    fill_shared: &Py<PyDict>,
    fill_copied: &[(Py<PyString>, Py<PyAny>)],
) -> PyResult<Option<Scanning>> {
    let plan = &decoder.get().plan;
    let names = Names::of(py, plan)?;
    let top = names.top(plan).to_vec();
    for (i, name) in SLOTS.iter().enumerate() {
        if top.iter().any(|n| n == name) {
            continue;
        }
        if i != BREACHES {
            return Ok(None);
        }
        let default = match fill_shared.bind(py).get_item(name)? {
            Some(d) => Some(d),
            None => fill_copied.iter().find(|(n, _)| n.bind(py).to_str().is_ok_and(|n| n == *name)).map(|(_, d)| d.bind(py).clone()),
        };
        if default.is_none_or(|d| d.is_truthy().unwrap_or(true)) {
            return Ok(None);
        }
    }
    let wanted = top.iter().map(|n| slot(n)).collect();
    Ok(Some(Scanning { names, wanted, version: version.bind(py).extract()? }))
}

/// The errors the Python path takes for "not a TurnEvent" (`KeyError`, `TypeError`,
/// `ValueError`).
pub(crate) fn is_not_a_turn(py: Python<'_>, err: &PyErr) -> bool {
    err.is_instance_of::<pyo3::exceptions::PyKeyError>(py)
        || err.is_instance_of::<pyo3::exceptions::PyTypeError>(py)
        || err.is_instance_of::<pyo3::exceptions::PyValueError>(py)
}

/// Texts numbered in the order first seen; emptied with the tally it serves.
#[derive(Default)]
pub(crate) struct Interned {
    index: FastMap<Box<str>, u32>,
    texts: Vec<Box<str>>,
}

impl Interned {
    pub(crate) fn of(&mut self, text: &str) -> u32 {
        if let Some(i) = self.index.get(text) {
            return *i;
        }
        let i = u32::try_from(self.texts.len()).expect("fewer texts than a batch's messages");
        self.texts.push(text.into());
        self.index.insert(text.into(), i);
        i
    }

    pub(crate) fn text(&self, i: u32) -> &str {
        &self.texts[i as usize]
    }

    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.texts.clear();
    }
}

/// A message's topic, partition and offset, when the step may take it: it has a topic
/// and a position (librdkafka's error events have neither) and no headers (a redriven
/// turn, or anything else a header may mean, is the Python path's to read).
pub(crate) fn position<'py>(py: Python<'py>, msg: &Bound<'py, PyAny>) -> PyResult<Option<(Bound<'py, PyAny>, i64, i64)>> {
    let topic = msg.call_method0(intern!(py, "topic"))?;
    if topic.is_none() || !msg.call_method0(intern!(py, "headers"))?.is_none() {
        return Ok(None);
    }
    let partition = msg.call_method0(intern!(py, "partition"))?.extract::<Option<i64>>()?;
    let offset = msg.call_method0(intern!(py, "offset"))?.extract::<Option<i64>>()?;
    Ok(partition.zip(offset).map(|(p, o)| (topic, p, o)))
}
