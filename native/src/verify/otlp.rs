//! A turn's verdicts as OTLP log records, the one home of the rule
//! `turnaudit.consumers.otel_records` documents: one `gen_ai.evaluation.result` event per
//! verdict the turn carries (safety, ethics, refusal, hedge, action risk), its score,
//! label and explanation, the turn's own attributes and its model's (v4), every text cut
//! (`MAX_TEXT`, `MAX_EXPLANATION`, `MAX_IDS`), parented to the runtime's span (v4's
//! `trace_context`, when well formed), timed at the turn's occurred_at, body
//! `"<name>: <label>"`.
//!
//! Two sources give the rule the same record through `Rec` (as `htir_steps.rs`): a
//! scanned message's slots (the consumer step's `otlp` outlet, `consume.rs`) and a
//! decoded event's dict (`otlp_turn_records`, the sink's record-by-record path).
//!
//! Each record is written as one `ScopeLogs.log_records` entry (field 2, length-delimited
//! `LogRecord`), so a sink's buffer of them is the inside of a `ScopeLogs` and
//! `otlp_envelope.rs` writes the envelope (`ExportLogsServiceRequest` / `ResourceLogs` /
//! `ScopeLogs`, the `opentelemetry-proto` messages) around runs of them: protobuf's
//! repeated fields concatenate. The records themselves are written field by field with
//! prost's wire primitives from the borrowed texts (no owned message per attribute); the
//! Python tests read them back with `opentelemetry.proto` and hold them to the SDK's.

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict};

use super::contracts::{ACTION, DOMAIN, EVENT_ID, OCCURRED_AT, PACK_ID, PRODUCER_ID, SEQUENCE, SESSION_ID, VERDICTS};
use super::htir_steps::{key, Key, Rec};
use super::line::{ALL_SLOTS, MODEL, RESPONSE_ID, TRACE_CONTEXT};
use crate::decode::scan::V;

pub(crate) const MAX_TEXT: usize = 256;
pub(crate) const MAX_EXPLANATION: usize = 512;
pub(crate) const MAX_IDS: usize = 8;
const EVENT_NAME: &str = "gen_ai.evaluation.result";
const SEVERITY_INFO: u64 = 9; // SeverityNumber.INFO
/// `ScopeLogs.log_records`: the tag each record of a buffer starts with.
pub(super) const LOG_RECORDS: u32 = 2;

/// How a turn was read, which its records carry, and when the records were made.
pub(crate) struct Read {
    pub(crate) millis: i64,
    pub(crate) version: i64,
    pub(crate) redelivered: bool,
    pub(crate) redriven: bool,
    pub(crate) observed_ns: u64,
}

/// What the rule reads beyond `Rec`: Python's `bool(value)` and a whole number.
pub(crate) trait Scalar {
    fn truthy(&self) -> PyResult<bool>;
    fn int(&self) -> PyResult<i64>;
}

impl Scalar for &V<'_> {
    fn truthy(&self) -> PyResult<bool> {
        Ok(V::truthy(self))
    }
    fn int(&self) -> PyResult<i64> {
        match self {
            V::Int(i) => Ok(*i),
            V::Bool(b) => Ok(i64::from(*b)),
            _ => Err(PyTypeError::new_err("an integer attribute is a whole number")),
        }
    }
}

impl Scalar for Bound<'_, PyAny> {
    fn truthy(&self) -> PyResult<bool> {
        self.is_truthy()
    }
    fn int(&self) -> PyResult<i64> {
        self.extract()
    }
}

/// Python's `value[:n]`: the first `n` characters.
fn cut(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(at, _)| &s[..at])
}

fn text<'a, 'py, R: Rec<'py>>(v: &'a R, name: &str) -> PyResult<&'a str> {
    v.text()?.ok_or_else(|| PyTypeError::new_err(format!("{name} is a text")))
}

/// A slot the rule reads; missing (a field the writer lacks, v3's model) reads as null.
fn at<R>(f: &[Option<R>], slot: usize) -> Option<&R> {
    f[slot].as_ref()
}

fn need<'f, R>(f: &'f [Option<R>], slot: usize, name: &str) -> PyResult<&'f R> {
    f[slot].as_ref().ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))
}

/// An attribute's value (`AnyValue`'s one field).
enum Val<'a> {
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
}

pub(super) fn put_len(out: &mut Vec<u8>, tag: u32, len: usize) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

fn put_str(out: &mut Vec<u8>, tag: u32, s: &str) {
    put_len(out, tag, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn len_of_str(tag_len: usize, s: &str) -> usize {
    tag_len + encoded_len_varint(s.len() as u64) + s.len()
}

/// One `attributes` entry (`LogRecord` field 6): `KeyValue { key, value: AnyValue }`.
fn put_attr(out: &mut Vec<u8>, k: &str, v: &Val<'_>) {
    let any = match v {
        Val::Str(s) => len_of_str(1, s),
        Val::Bool(_) => 2,
        Val::Int(i) => 1 + encoded_len_varint(*i as u64),
        Val::Double(_) => 9,
    };
    put_len(out, 6, len_of_str(1, k) + 1 + encoded_len_varint(any as u64) + any);
    put_str(out, 1, k);
    put_len(out, 2, any);
    match v {
        Val::Str(s) => put_str(out, 1, s),
        Val::Bool(b) => {
            encode_key(2, WireType::Varint, out);
            encode_varint(u64::from(*b), out);
        }
        Val::Int(i) => {
            encode_key(3, WireType::Varint, out);
            encode_varint(*i as u64, out);
        }
        Val::Double(x) => {
            encode_key(4, WireType::SixtyFourBit, out);
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
}

/// A record's span: trace id, span id, flags.
type Span = ([u8; 16], [u8; 8], u32);

/// The runtime's span of v4's `trace_context`: (trace id, span id, flags); `None` when
/// absent, malformed or all zero.
fn span_parent<'py, R: Rec<'py> + Scalar>(py: Python<'py>, context: Option<&R>) -> PyResult<Option<Span>> {
    let Some(context) = context.filter(|c| !c.is_null()) else { return Ok(None) };
    let (trace, span) = (context.at(&key!(py, "trace_id"))?, context.at(&key!(py, "span_id"))?);
    let (Some(trace), Some(span)) = (hex_id::<16>(text(&trace, "trace_id")?), hex_id::<8>(text(&span, "span_id")?)) else {
        return Ok(None);
    };
    let flags = context.at(&key!(py, "trace_flags"))?.int()? & 0xFF;
    Ok(Some((trace, span, flags as u32)))
}

/// `N` bytes of `2N` lowercase hex digits, not all zero.
fn hex_id<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    (out != [0u8; N]).then_some(out)
}

/// "<what>: id, id, ... and N more", cut to `MAX_EXPLANATION` characters.
fn named<'py, R: Rec<'py>>(what: &str, ids: &[R]) -> PyResult<String> {
    let mut out = format!("{what}: ");
    for (i, id) in ids.iter().take(MAX_IDS).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(cut(text(id, "an id")?, MAX_TEXT));
    }
    if ids.len() > MAX_IDS {
        out.push_str(&format!(" and {} more", ids.len() - MAX_IDS));
    }
    Ok(cut(&out, MAX_EXPLANATION).to_owned())
}

/// One verdict's record before it is written.
struct Verdict<'a> {
    name: &'static str,
    score: f64,
    label: &'a str,
    explanation: Option<String>,
    /// action_risk's own: risk tier, output policy, human decision required.
    action: Option<(&'a str, &'a str, bool)>,
}

/// The turn's records onto `out` (see the module comment); how many. `f`: the turn's
/// slots (`ALL_SLOTS`); `common`: scratch for the attributes every record carries.
pub(crate) fn turn_records<'py, R: Rec<'py> + Scalar>(py: Python<'py>, f: &[Option<R>], read: &Read, out: &mut Vec<u8>, common: &mut Vec<u8>) -> PyResult<usize> {
    common.clear();
    for (slot, name, k) in [(PACK_ID, "pack_id", "turnaudit.pack_id"), (DOMAIN, "domain", "turnaudit.domain"), (SESSION_ID, "session_id", "turnaudit.session_id"), (EVENT_ID, "event_id", "turnaudit.event_id")] {
        put_attr(common, k, &Val::Str(cut(text(need(f, slot, name)?, name)?, MAX_TEXT)));
    }
    put_attr(common, "turnaudit.schema_version", &Val::Int(read.version));
    put_attr(common, "turnaudit.redelivered", &Val::Bool(read.redelivered));
    put_attr(common, "turnaudit.redriven", &Val::Bool(read.redriven));
    // v1/v2 records carry no stream identity (read with an empty producer id).
    let producer = need(f, PRODUCER_ID, "producer_id")?;
    if producer.truthy()? {
        put_attr(common, "turnaudit.producer_id", &Val::Str(cut(text(producer, "producer_id")?, MAX_TEXT)));
        put_attr(common, "turnaudit.sequence", &Val::Int(need(f, SEQUENCE, "sequence")?.int()?));
    }
    if let Some(response) = at(f, RESPONSE_ID) {
        if response.truthy()? {
            put_attr(common, "gen_ai.response.id", &Val::Str(cut(text(response, "response_id")?, MAX_TEXT)));
        }
    }
    if let Some(model) = at(f, MODEL).filter(|m| !m.is_null()) {
        let provider = model.at(&key!(py, "provider"))?;
        put_attr(common, "gen_ai.provider.name", &Val::Str(cut(text(&provider, "provider")?, MAX_TEXT)));
        let request = model.at(&key!(py, "request_model"))?;
        put_attr(common, "gen_ai.request.model", &Val::Str(cut(text(&request, "request_model")?, MAX_TEXT)));
        let response = model.at(&key!(py, "response_model"))?;
        if response.truthy()? {
            put_attr(common, "gen_ai.response.model", &Val::Str(cut(text(&response, "response_model")?, MAX_TEXT)));
        }
    }
    // fixed64 nanoseconds: a time before 1970 or past 2554 (the SDK path failed on it) wraps.
    let time_ns = (read.millis as u64).wrapping_mul(1_000_000);
    let parent = span_parent(py, at(f, TRACE_CONTEXT))?;

    // The scratch past the turn's attributes takes each record's own (no buffer a record).
    let turn_len = common.len();
    let mut write = |out: &mut Vec<u8>, v: Verdict<'_>| write_record(out, &v, time_ns, parent.as_ref(), common, turn_len, read.observed_ns);
    let bundle = need(f, VERDICTS, "verdicts")?;
    let mut n = 0;
    let verdicts = [("safety", key!(py, "safety_verdict"), key!(py, "violated_boundary_ids"), "violated boundaries"), ("ethics", key!(py, "ethics_verdict"), key!(py, "violated_predicate_ids"), "violated predicates")];
    for (name, verdict, ids, what) in verdicts {
        let v = bundle.at(&verdict)?;
        if v.is_null() {
            continue;
        }
        let passed = v.at(&key!(py, "passed"))?.truthy()?;
        let ids = v.at(&ids)?;
        let explanation = if passed || !ids.truthy()? {
            None
        } else {
            let items = ids.items()?.ok_or_else(|| PyTypeError::new_err("violated ids are a list"))?;
            Some(named(what, &items)?)
        };
        let label = if passed { "pass" } else { "fail" };
        write(out, Verdict { name, score: f64::from(u8::from(passed)), label, explanation, action: None });
        n += 1;
    }
    let refused = bundle.at(&key!(py, "refusal_emitted"))?.truthy()?;
    write(out, Verdict { name: "refusal", score: f64::from(u8::from(refused)), label: if refused { "refused" } else { "not_refused" }, explanation: None, action: None });
    let hedged = bundle.at(&key!(py, "hedge_injected"))?.truthy()?;
    write(out, Verdict { name: "hedge", score: f64::from(u8::from(hedged)), label: if hedged { "hedged" } else { "not_hedged" }, explanation: None, action: None });
    n += 2;
    let action = need(f, ACTION, "action_assessment")?;
    if !action.is_null() {
        let (verdict, tier, policy) = (action.at(&key!(py, "action_risk_verdict"))?, action.at(&key!(py, "risk_tier"))?, action.at(&key!(py, "output_policy"))?);
        let (v, t, p) = (text(&verdict, "action_risk_verdict")?, text(&tier, "risk_tier")?, text(&policy, "output_policy")?);
        let human = action.at(&key!(py, "human_decision_required"))?.truthy()?;
        let score = match v {
            "SEAL" => 1.0,
            "HOLD" => 0.5,
            _ => 0.0,
        };
        let why = format!("risk tier {t}, output policy {p}{}", if human { ", human decision required" } else { "" });
        let lowered = v.to_lowercase();
        let own = Some((cut(t, MAX_TEXT), cut(p, MAX_TEXT), human));
        write(out, Verdict { name: "action_risk", score, label: cut(&lowered, MAX_TEXT), explanation: Some(cut(&why, MAX_TEXT).to_owned()), action: own });
        n += 1;
    }
    Ok(n)
}

/// One `ScopeLogs.log_records` entry. `scratch`: the turn's attributes (`turn_len` bytes),
/// then room for the record's own.
fn write_record(out: &mut Vec<u8>, v: &Verdict<'_>, time_ns: u64, parent: Option<&Span>, scratch: &mut Vec<u8>, turn_len: usize, observed_ns: u64) {
    scratch.truncate(turn_len);
    let own = scratch;
    put_attr(own, "gen_ai.evaluation.name", &Val::Str(v.name));
    put_attr(own, "gen_ai.evaluation.score.value", &Val::Double(v.score));
    put_attr(own, "gen_ai.evaluation.score.label", &Val::Str(v.label));
    if let Some(explanation) = &v.explanation {
        put_attr(own, "gen_ai.evaluation.explanation", &Val::Str(explanation));
    }
    if let Some((tier, policy, human)) = v.action {
        put_attr(own, "turnaudit.action.risk_tier", &Val::Str(tier));
        put_attr(own, "turnaudit.action.output_policy", &Val::Str(policy));
        put_attr(own, "turnaudit.action.human_decision_required", &Val::Bool(human));
    }
    let (common, own) = own.split_at(turn_len);
    let body = v.name.len() + 2 + v.label.len();
    let body_any = 1 + encoded_len_varint(body as u64) + body;
    let mut len = 9 + 2 + len_of_str(1, "INFO") + 1 + encoded_len_varint(body_any as u64) + body_any;
    len += own.len() + common.len() + 9 + len_of_str(1, EVENT_NAME);
    if let Some((_, _, flags)) = parent {
        len += 18 + 10 + if *flags != 0 { 5 } else { 0 };
    }
    put_len(out, LOG_RECORDS, len);
    let start = out.len();
    encode_key(1, WireType::SixtyFourBit, out);
    out.extend_from_slice(&time_ns.to_le_bytes());
    encode_key(2, WireType::Varint, out);
    encode_varint(SEVERITY_INFO, out);
    put_str(out, 3, "INFO");
    put_len(out, 5, body_any);
    put_len(out, 1, body);
    out.extend_from_slice(v.name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(v.label.as_bytes());
    // Repeated fields concatenate: the verdict's own attributes, then the turn's.
    out.extend_from_slice(own);
    out.extend_from_slice(common);
    if let Some((trace, span, flags)) = parent {
        if *flags != 0 {
            encode_key(8, WireType::ThirtyTwoBit, out);
            out.extend_from_slice(&flags.to_le_bytes());
        }
        put_len(out, 9, 16);
        out.extend_from_slice(trace);
        put_len(out, 10, 8);
        out.extend_from_slice(span);
    }
    encode_key(11, WireType::SixtyFourBit, out);
    out.extend_from_slice(&observed_ns.to_le_bytes());
    put_str(out, 12, EVENT_NAME);
    debug_assert_eq!(out.len() - start, len);
}

/// An ordinary scanned turn's OTLP records onto `out` (as the record-by-record path
/// writes them: new, not redriven); false, and `out` as it was, where the rule cannot
/// read it as the decoded event would be read (the Python path then takes it).
pub(crate) fn scanned_records(py: Python<'_>, f: &[Option<V<'_>>; ALL_SLOTS], mut read: Read, out: &mut Vec<u8>, common: &mut Vec<u8>) -> bool {
    let Some(V::Int(millis)) = f[OCCURRED_AT] else { return false };
    read.millis = millis;
    let slots: [Option<&V<'_>>; ALL_SLOTS] = std::array::from_fn(|i| f[i].as_ref());
    let mark = out.len();
    let done = turn_records(py, &slots, &read, out, common).is_ok();
    if !done {
        out.truncate(mark);
    }
    done
}

/// The records of a decoded event (a dict) onto the end of `out`; how many. `millis`:
/// its occurred_at in epoch ms; the rest, how the turn was read (`Read`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn otlp_turn_records<'py>(py: Python<'py>, event: &Bound<'py, PyDict>, millis: i64, version: i64, redelivered: bool, redriven: bool, observed_ns: u64, out: &Bound<'py, PyByteArray>) -> PyResult<usize> {
    let mut f: [Option<Bound<'py, PyAny>>; ALL_SLOTS] = std::array::from_fn(|_| None);
    let read = [
        (key!(py, "pack_id"), PACK_ID),
        (key!(py, "domain"), DOMAIN),
        (key!(py, "session_id"), SESSION_ID),
        (key!(py, "event_id"), EVENT_ID),
        (key!(py, "producer_id"), PRODUCER_ID),
        (key!(py, "sequence"), SEQUENCE),
        (key!(py, "verdicts"), VERDICTS),
        (key!(py, "action_assessment"), ACTION),
        (key!(py, "response_id"), RESPONSE_ID),
        (key!(py, "model"), MODEL),
        (key!(py, "trace_context"), TRACE_CONTEXT),
    ];
    for (key, slot) in read {
        f[slot] = event.get_item(key.interned)?;
    }
    let mut records = Vec::with_capacity(4096);
    let read = Read { millis, version, redelivered, redriven, observed_ns };
    let n = turn_records(py, &f, &read, &mut records, &mut Vec::with_capacity(1024))?;
    append(out, &records)?;
    Ok(n)
}

/// `bytes` onto the end of a bytearray.
pub(crate) fn append(out: &Bound<'_, PyByteArray>, bytes: &[u8]) -> PyResult<()> {
    let old = out.len();
    out.resize(old + bytes.len())?;
    // SAFETY: the GIL is held and nothing else touches the bytearray while it is
    // written; it was just resized to hold `bytes` after its `old` bytes.
    unsafe { out.as_bytes_mut()[old..].copy_from_slice(bytes) };
    Ok(())
}
