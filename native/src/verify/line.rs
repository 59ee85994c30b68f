//! The log sink's canonical turn line, rendered natively from a scanned record: the
//! bytes `turnaudit.consumers.log_sink.render_line` writes for an ordinary turn under
//! `service_logging` (surfaces not written, no structlog context-local values), JSON as
//! orjson writes it (compact, non-ASCII kept as UTF-8, control characters escaped,
//! floats in orjson's shortest form) with the sink's Unicode line breaks escaped.
//!
//! The keys and their order are not kept here: the sink passes its own list
//! (`LINE_KEYS`) at construction, and a key this file cannot render is refused then.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::contracts::{slot, ACTION, EVENT_ID, OCCURRED_AT, PACK_ID, PATH, SEQUENCE, SESSION_ID, SLOTS, VERDICTS};
use crate::decode::scan::V;

/// The scanned slots the consumer step reads: verify's (`SLOTS`) and then these.
/// `tool_steps` and `runtime` only the HTIR feeder's outlet reads (`htir_steps.rs`), the
/// last three only the OTel sink's (`otlp.rs`).
pub(crate) const EXTRA: [&str; 7] = ["turn", "task", "tool_steps", "runtime", "trace_context", "response_id", "model"];
pub(crate) const TURN: usize = SLOTS.len();
pub(crate) const TASK: usize = SLOTS.len() + 1;
pub(crate) const TOOL_STEPS: usize = SLOTS.len() + 2;
pub(crate) const RUNTIME: usize = SLOTS.len() + 3;
pub(crate) const TRACE_CONTEXT: usize = SLOTS.len() + 4;
pub(crate) const RESPONSE_ID: usize = SLOTS.len() + 5;
pub(crate) const MODEL: usize = SLOTS.len() + 6;
pub(crate) const ALL_SLOTS: usize = SLOTS.len() + EXTRA.len();

/// A root field's slot among `ALL_SLOTS`.
pub(crate) fn all_slot(name: &str) -> Option<usize> {
    slot(name).or_else(|| EXTRA.iter().position(|n| *n == name).map(|i| SLOTS.len() + i))
}

/// What one key of the line holds.
#[derive(Clone)]
enum Part {
    Top(usize),
    OccurredAt,
    SchemaVersion,
    TaskId,
    Bundle(&'static str),
    Safety(&'static str),
    Ethics(&'static str),
    IdentityScore,
    Action(&'static str),
    /// A new, in-order turn: not redelivered; no breaches (the step hands back any other).
    Literal(&'static [u8]),
    Topic,
    Partition,
    Offset,
    Constant(Vec<u8>),
    Timestamp,
}

fn part(key: &str) -> Option<Part> {
    Some(match key {
        "event_id" => Part::Top(EVENT_ID),
        "session_id" => Part::Top(SESSION_ID),
        "turn" => Part::Top(TURN),
        "sequence" => Part::Top(SEQUENCE),
        "occurred_at" => Part::OccurredAt,
        "path" => Part::Top(PATH),
        "pack_id" => Part::Top(PACK_ID),
        "domain" => Part::Top(super::contracts::DOMAIN),
        "schema_version" => Part::SchemaVersion,
        "task_id" => Part::TaskId,
        "refusal_emitted" => Part::Bundle("refusal_emitted"),
        "hedge_injected" => Part::Bundle("hedge_injected"),
        "violated_boundary_ids" => Part::Safety("violated_boundary_ids"),
        "violated_predicate_ids" => Part::Ethics("violated_predicate_ids"),
        "safety_passed" => Part::Safety("passed"),
        "ethics_passed" => Part::Ethics("passed"),
        "identity_score" => Part::IdentityScore,
        "flagged" => Part::Top(slot("flagged")?),
        "execution_verdict" => Part::Action("execution_verdict"),
        "action_risk_verdict" => Part::Action("action_risk_verdict"),
        "risk_tier" => Part::Action("risk_tier"),
        "output_policy" => Part::Action("output_policy"),
        "human_decision_required" => Part::Action("human_decision_required"),
        "redelivered" => Part::Literal(b"false"),
        "breaches" => Part::Literal(b"[]"),
        "topic" => Part::Topic,
        "partition" => Part::Partition,
        "offset" => Part::Offset,
        "timestamp" => Part::Timestamp,
        _ => return None,
    })
}

/// Where an ordinary message was read, and the run's timestamp (a JSON string).
pub(crate) struct Read<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i64,
    pub(crate) offset: i64,
    pub(crate) stamp: &'a [u8],
}

/// The line's keys in the sink's order, each with what it holds.
pub(crate) struct LineFormat {
    parts: Vec<(Vec<u8>, Part)>,
}

impl LineFormat {
    /// `keys`: the line's keys in order; `constants`: the keys whose value is a fixed
    /// text (`event`, `logger`, `level`).
    pub(crate) fn new(keys: Vec<String>, constants: Vec<(String, String)>) -> PyResult<Self> {
        let mut parts = Vec::with_capacity(keys.len());
        for key in keys {
            let held = match constants.iter().find(|(k, _)| *k == key) {
                Some((_, text)) => {
                    let mut out = Vec::new();
                    write_str(&mut out, text);
                    Part::Constant(out)
                }
                None => part(&key).ok_or_else(|| PyValueError::new_err(format!("the native line renders no key {key:?}")))?,
            };
            let mut name = Vec::new();
            write_str(&mut name, &key);
            parts.push((name, held));
        }
        Ok(LineFormat { parts })
    }

    /// The line, newline-ended, onto `out`; `None` (and `out` as it was) where a value is
    /// not of a kind the Python path renders the same way (it then renders the line).
    pub(crate) fn render(&self, out: &mut Vec<u8>, f: &[Option<V<'_>>], version: i64, read: &Read<'_>) -> Option<()> {
        let start = out.len();
        let done = self.render_parts(out, f, version, read);
        if done.is_none() {
            out.truncate(start);
        }
        done
    }

    fn render_parts(&self, out: &mut Vec<u8>, f: &[Option<V<'_>>], version: i64, read: &Read<'_>) -> Option<()> {
        let bundle = f[VERDICTS].as_ref()?;
        let nested = |outer: Option<&V<'_>>| -> Option<bool> {
            match outer? {
                V::Null => Some(false),
                V::Fields(_) => Some(true),
                _ => None,
            }
        };
        let safety = bundle.field("safety_verdict");
        let ethics = bundle.field("ethics_verdict");
        let identity = bundle.field("identity_score");
        let action = f[ACTION].as_ref();
        for (i, (name, held)) in self.parts.iter().enumerate() {
            out.push(if i == 0 { b'{' } else { b',' });
            out.extend_from_slice(name);
            out.push(b':');
            match held {
                Part::Top(at) => write_v(out, f[*at].as_ref()?)?,
                Part::OccurredAt => {
                    let Some(V::Int(ms)) = f[OCCURRED_AT] else { return None };
                    write_occurred(out, ms);
                }
                Part::SchemaVersion => write_int(out, version),
                Part::TaskId => match f[TASK].as_ref()? {
                    V::Null => out.extend_from_slice(b"null"),
                    task @ V::Fields(_) => write_v(out, task.field("task_id")?)?,
                    _ => return None,
                },
                Part::Bundle(name) => write_v(out, bundle.field(name)?)?,
                Part::Safety(name) | Part::Ethics(name) => {
                    let outer = if matches!(held, Part::Safety(_)) { safety } else { ethics };
                    if nested(outer)? {
                        write_v(out, outer?.field(name)?)?;
                    } else if *name == "passed" {
                        out.extend_from_slice(b"null");
                    } else {
                        out.extend_from_slice(b"[]");
                    }
                }
                Part::IdentityScore => {
                    if nested(identity)? {
                        write_v(out, identity?.field("score")?)?;
                    } else {
                        out.extend_from_slice(b"null");
                    }
                }
                Part::Action(name) => {
                    if nested(action)? {
                        write_v(out, action?.field(name)?)?;
                    } else {
                        out.extend_from_slice(b"null");
                    }
                }
                Part::Literal(text) => out.extend_from_slice(text),
                Part::Topic => write_str(out, read.topic),
                Part::Partition => write_int(out, read.partition),
                Part::Offset => write_int(out, read.offset),
                Part::Constant(text) => out.extend_from_slice(text),
                Part::Timestamp => out.extend_from_slice(read.stamp),
            }
        }
        out.extend_from_slice(b"}\n");
        Some(())
    }
}

/// A scalar or a list of them as orjson writes it; `None` for a record, a map or bytes
/// (never a line's value for a shipped schema: the Python path renders those).
fn write_v(out: &mut Vec<u8>, v: &V<'_>) -> Option<()> {
    match v {
        V::Null => out.extend_from_slice(b"null"),
        V::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        V::Int(i) => write_int(out, *i),
        V::Float(x) => write_float(out, *x),
        V::Str(s) => write_str(out, s),
        V::List(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_v(out, item)?;
            }
            out.push(b']');
        }
        V::Bytes(_) | V::Fields(_) => return None,
    }
    Some(())
}

fn write_int(out: &mut Vec<u8>, i: i64) {
    use std::io::Write;
    let _ = write!(out, "{i}");
}

/// A text as orjson escapes it (`"`, `\`, control characters; `\b \t \n \f \r` short,
/// the rest `\u00xx`), plus U+2028, U+2029 and U+0085 escaped as the sink escapes them
/// (one line stays one line for `str.splitlines`).
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut plain = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            0x00..=0x1f => Some(b""),
            0xc2 if bytes.get(i + 1) == Some(&0x85) => Some(b"\\u0085"),
            0xe2 if bytes.get(i + 1) == Some(&0x80) && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9)) => {
                Some(if bytes[i + 2] == 0xa8 { b"\\u2028" } else { b"\\u2029" })
            }
            _ => None,
        };
        let Some(escape) = escape else {
            i += 1;
            continue;
        };
        out.extend_from_slice(&bytes[plain..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        i += match b {
            0xc2 => 2,
            0xe2 => 3,
            _ => 1,
        };
        plain = i;
    }
    out.extend_from_slice(&bytes[plain..]);
    out.push(b'"');
}

/// A float as orjson writes it: the shortest digits that read back the same, positional
/// for decimal exponents -5..=15 (`0.00001`, `1000000000000000.0`), else `1.5e-7`,
/// `1e+16`; NaN and the infinities as `null`.
pub(crate) fn write_float(out: &mut Vec<u8>, x: f64) {
    if !x.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    let (digits, exp) = shortest_digits(x.abs());
    if x.is_sign_negative() {
        out.push(b'-');
    }
    if x == 0.0 {
        out.extend_from_slice(b"0.0");
    } else if (-5..=15).contains(&exp) {
        if exp >= 0 {
            let whole = exp as usize + 1;
            if digits.len() <= whole {
                out.extend_from_slice(&digits);
                out.extend(std::iter::repeat_n(b'0', whole - digits.len()));
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..whole]);
                out.push(b'.');
                out.extend_from_slice(&digits[whole..]);
            }
        } else {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
            out.extend_from_slice(&digits);
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        write_int(out, i64::from(exp.abs()));
    }
}

/// The shortest digits that read back as `x` (finite, not negative), ties between two
/// such digit strings to the even one as Python's `repr` and orjson break them (Rust's
/// `{:e}` breaks them upwards), and the decimal exponent of the first digit: ryu's text
/// taken apart.
fn shortest_digits(x: f64) -> (Vec<u8>, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(x);
    let (mantissa, exp) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().expect("ryu writes an integer exponent")),
        None => (text, 0),
    };
    let whole = mantissa.find('.').unwrap_or(mantissa.len()) as i32;
    let all: Vec<u8> = mantissa.bytes().filter(|b| *b != b'.').collect();
    let leading = all.iter().take_while(|b| **b == b'0').count();
    let mut digits = all[leading..].to_vec();
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    (digits, whole - 1 + exp - leading as i32)
}

/// An occurred_at (epoch ms) as the sink writes it: `"2026-11-01T12:00:00.123Z"`.
fn write_occurred(out: &mut Vec<u8>, ms: i64) {
    use std::io::Write;
    let (seconds, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, in_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (in_day / 3600, in_day % 3600 / 60, in_day % 60);
    let _ = write!(out, "\"{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z\"");
}

/// (year, month, day) of a day counted from 1970-01-01 (the proleptic Gregorian
/// calendar, as Python's `date`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(x: f64) -> String {
        let mut out = Vec::new();
        write_float(&mut out, x);
        String::from_utf8(out).unwrap()
    }

    fn text(s: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn texts_are_escaped_as_orjson_and_the_sink_escape_them() {
        assert_eq!(text("a\"b\\c/\u{7f}é"), "\"a\\\"b\\\\c/\u{7f}é\"");
        assert_eq!(text("\u{0}\u{1f}\u{8}\u{c}\n\r\t"), "\"\\u0000\\u001f\\b\\f\\n\\r\\t\"");
        assert_eq!(text("x\u{2028}y\u{2029}z\u{85}"), "\"x\\u2028y\\u2029z\\u0085\"");
    }

    #[test]
    fn floats_take_orjsons_layout() {
        let cases: [(f64, &str); 11] = [
            (0.1, "0.1"),
            // 2^46 + 0.125: ...64.12 and ...64.13 both read back; the tie goes to the even
            (70368744177664.12, "70368744177664.12"),
            (123456789.0, "123456789.0"),
            (1e-5, "0.00001"),
            (1e-6, "1e-6"),
            (1.5e-7, "1.5e-7"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (-0.0, "-0.0"),
            (f64::NAN, "null"),
            (2.5e-5, "0.000025"),
        ];
        for (x, want) in cases {
            assert_eq!(float(x), want, "{x}");
        }
    }

    #[test]
    fn days_count_from_the_unix_epoch() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
    }
}
