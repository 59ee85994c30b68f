//! A trace being assembled, held as Rust data (no Python object outlives the call that
//! added a turn), and the record `schemas/htir_trace.v2.avsc` writes of it once closed:
//! its steps are Avro bytes already (written as each turn joined, indices and all), the
//! rest is written here field by field in the schema's order.
//!
//! Also the one home of the gap rule: which task steps a trace lacks in its middle, and
//! what its warning says (`turnaudit.htir.HtirTrace.gap` calls `trace_gap`).

use crate::encode::{long, sized};

/// How a trace closed: `TraceClose`'s symbols, in the schema's order.
pub(crate) const CLOSED_BY: [&str; 3] = ["END_OF_TASK", "IDLE_TIMEOUT", "SHUTDOWN"];

pub(crate) struct OpenTrace {
    /// Opening order: the store's ordered answers (expiry, hand-over, shutdown) follow it.
    pub(crate) serial: u64,
    pub(crate) task_family: String,
    pub(crate) session_id: String,
    pub(crate) topic: String,
    pub(crate) partition: i64,
    pub(crate) runtime_name: String,
    pub(crate) runtime_version: String,
    /// The steps' records, back to back, and how many.
    pub(crate) steps: Vec<u8>,
    pub(crate) step_count: i64,
    /// The task steps of the trace's turn steps, in the order they joined.
    pub(crate) turn_order: Vec<i64>,
    pub(crate) sequences: Vec<i64>,
    pub(crate) event_ids: Vec<String>,
    /// (partition, offset) of every turn, in the order they joined.
    pub(crate) turn_offsets: Vec<(i64, i64)>,
    pub(crate) last_seen: f64,
}

impl OpenTrace {
    /// Where the trace's first turn was read: what a restart must read again for it.
    pub(crate) fn first_read(&self) -> (i64, i64) {
        self.turn_offsets[0]
    }

    /// The trace's record behind `header`: `closed_by`, an index of `CLOSED_BY`.
    pub(crate) fn record(&self, header: &[u8], task_id: &str, closed_by: usize, missing: &[i64]) -> Vec<u8> {
        let mut out = Vec::with_capacity(header.len() + self.steps.len() + 64 + self.event_ids.len() * 40);
        out.extend_from_slice(header);
        long(&mut out, 2); // format_version
        sized(&mut out, task_id.as_bytes());
        sized(&mut out, self.task_family.as_bytes());
        sized(&mut out, self.session_id.as_bytes());
        long(&mut out, closed_by as i64);
        // source
        sized(&mut out, self.topic.as_bytes());
        long(&mut out, self.partition);
        let offsets = self.turn_offsets.iter().map(|&(_, o)| o);
        long(&mut out, offsets.clone().min().unwrap_or(0));
        long(&mut out, offsets.max().unwrap_or(0));
        long(&mut out, self.sequences.iter().copied().min().unwrap_or(0));
        long(&mut out, self.sequences.iter().copied().max().unwrap_or(0));
        sized(&mut out, self.runtime_name.as_bytes());
        sized(&mut out, self.runtime_version.as_bytes());
        array(&mut out, self.event_ids.len(), |out| {
            for id in &self.event_ids {
                sized(out, id.as_bytes());
            }
        });
        array(&mut out, self.step_count as usize, |out| out.extend_from_slice(&self.steps));
        array(&mut out, self.turn_offsets.len(), |out| {
            for &(partition, offset) in &self.turn_offsets {
                long(out, partition);
                long(out, offset);
            }
        });
        array(&mut out, missing.len(), |out| {
            for &step in missing {
                long(out, step);
            }
        });
        out
    }
}

/// An Avro array as fastavro writes it: one block of `len` items (none when empty), then 0.
fn array(out: &mut Vec<u8>, len: usize, items: impl FnOnce(&mut Vec<u8>)) {
    if len > 0 {
        long(out, len as i64);
        items(out);
    }
    out.push(0);
}

/// The task steps absent below the last one in `order` (sorted), and why the trace is not
/// the task's turns in order (`None` when it is).
pub(crate) fn trace_gap(order: &[i64]) -> (Vec<i64>, Option<String>) {
    let Some(&last) = order.iter().max() else {
        return (Vec::new(), None);
    };
    let mut seen = order.to_vec();
    seen.sort_unstable();
    seen.dedup();
    let missing: Vec<i64> = (0..=last.max(-1)).filter(|step| seen.binary_search(step).is_err()).collect();
    if !missing.is_empty() {
        let why = format!(
            "task step(s) {} missing from the trace (turns not in the stream range, refused or lost); steps not renumbered over the gap",
            listed(&missing)
        );
        return (missing, Some(why));
    }
    if order.windows(2).any(|w| w[0] > w[1]) {
        return (missing, Some(format!("turns out of task order: task steps {}", listed(order))));
    }
    (missing, None)
}

/// A list of ints as Python writes one (`[0, 2, 1]`).
fn listed(items: &[i64]) -> String {
    let texts: Vec<String> = items.iter().map(i64::to_string).collect();
    format!("[{}]", texts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_in_order_has_no_gap() {
        assert_eq!(trace_gap(&[0, 1, 2]), (vec![], None));
        assert_eq!(trace_gap(&[]), (vec![], None));
    }

    #[test]
    fn missing_steps_are_named_as_python_lists_them() {
        let (missing, why) = trace_gap(&[0, 3, 1]);
        assert_eq!(missing, vec![2]);
        assert!(why.unwrap().starts_with("task step(s) [2] missing"));
    }

    #[test]
    fn turns_out_of_order_are_named_when_none_is_missing() {
        assert_eq!(trace_gap(&[0, 2, 1]), (vec![], Some("turns out of task order: task steps [0, 2, 1]".into())));
    }

    #[test]
    fn negative_task_steps_leave_nothing_missing() {
        assert_eq!(trace_gap(&[-3, -1]).0, Vec::<i64>::new());
    }

    #[test]
    fn an_empty_array_is_one_zero_byte() {
        let mut out = Vec::new();
        array(&mut out, 0, |_| unreachable!());
        assert_eq!(out, vec![0]);
    }
}
