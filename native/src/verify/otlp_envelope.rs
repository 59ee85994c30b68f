//! A buffer of OTLP log records (`otlp.rs` writes them, each a `ScopeLogs.log_records`
//! entry) cut into `ExportLogsServiceRequest`s: the envelope (`ResourceLogs` /
//! `ScopeLogs`, the `opentelemetry-proto` messages) written around runs of records, as
//! protobuf's repeated fields concatenate.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::encoding::encoded_len_varint;
use prost::Message;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use super::otlp::{put_len, LOG_RECORDS};

/// The end of each record of a buffer of them (see `otlp.rs`'s module comment).
fn record_ends(records: &[u8]) -> PyResult<Vec<usize>> {
    let mut ends = Vec::new();
    let mut at = 0;
    let bad = || PyValueError::new_err("not a buffer of OTLP log records");
    while at < records.len() {
        if records[at] != (LOG_RECORDS << 3 | 2) as u8 {
            return Err(bad());
        }
        let mut rest = &records[at + 1..];
        let before = rest.len();
        let len = prost::encoding::decode_varint(&mut rest).map_err(|_| bad())? as usize;
        at += 1 + before - rest.len() + len;
        if at > records.len() {
            return Err(bad());
        }
        ends.push(at);
    }
    Ok(ends)
}

/// The buffer's records as `ExportLogsServiceRequest`s of at most `most_records` records
/// and about `most_bytes` bytes each (a record never split), each with how many records
/// it holds; split evenly into `parts` requests where those bounds allow (a sink sending
/// that many at once). `resource`: the resource's attributes, in order; `scope`: the
/// scope's name.
#[pyfunction]
#[pyo3(signature = (records, resource, scope, most_records, most_bytes, parts = 1))]
pub(crate) fn otlp_requests<'py>(py: Python<'py>, records: &Bound<'py, PyByteArray>, resource: Vec<(String, String)>, scope: String, most_records: usize, most_bytes: usize, parts: usize) -> PyResult<Vec<(Bound<'py, PyBytes>, usize)>> {
    let resource = Resource {
        attributes: resource.into_iter().map(|(key, v)| KeyValue { key, value: Some(AnyValue { value: Some(any_value::Value::StringValue(v)) }), ..Default::default() }).collect(),
        ..Default::default()
    };
    let scope = InstrumentationScope { name: scope, ..Default::default() };
    let (resource, scope) = (resource.encode_to_vec(), scope.encode_to_vec());
    let mut out = Vec::new();
    let (mut start, mut count) = (0, 0);
    // SAFETY: the GIL is held and no Python code runs while the buffer is read.
    let records = unsafe { records.as_bytes() };
    let ends = record_ends(records)?;
    let per = most_records.min(ends.len().div_ceil(parts.max(1))).max(1);
    for (i, end) in ends.iter().enumerate() {
        count += 1;
        let last = i + 1 == ends.len();
        if !(last || count == per || ends[i + 1] - start > most_bytes) {
            continue;
        }
        let inner = &records[start..*end];
        let scope_logs = 1 + encoded_len_varint(scope.len() as u64) + scope.len() + inner.len();
        let resource_logs = 1 + encoded_len_varint(resource.len() as u64) + resource.len() + 1 + encoded_len_varint(scope_logs as u64) + scope_logs;
        // The envelope first, then the records copied once, straight into the bytes object.
        let mut head = Vec::with_capacity(32 + resource.len() + scope.len());
        put_len(&mut head, 1, resource_logs); // ExportLogsServiceRequest.resource_logs
        put_len(&mut head, 1, resource.len()); // ResourceLogs.resource
        head.extend_from_slice(&resource);
        put_len(&mut head, 2, scope_logs); // ResourceLogs.scope_logs
        put_len(&mut head, 1, scope.len()); // ScopeLogs.scope
        head.extend_from_slice(&scope);
        let request = PyBytes::new_with(py, head.len() + inner.len(), |buf| {
            buf[..head.len()].copy_from_slice(&head);
            buf[head.len()..].copy_from_slice(inner);
            Ok(())
        })?;
        out.push((request, count));
        (start, count) = (*end, 0);
    }
    Ok(out)
}
