//! The HTIR trace store: the one place a trace opens (its task's step 0), a turn is
//! skipped (no open trace: its trace was published already) or added (its steps numbered
//! on, a redelivered turn's steps not twice), and a trace closes (end of task, idle,
//! shutdown) into its record's bytes. `turnaudit.htir.TraceAssembler` hands it task turns
//! (`TaskTurn`: the turn made into its steps by the step rule, `verify::htir_steps`).
//!
//! Open traces are Rust data: a turn's step dicts are written into the trace's bytes as
//! it joins and let go, so nothing of an open trace is an object Python's collector walks
//! (traces stay open over many batches). The store also knows what its open traces need
//! read again after a crash (`held_offsets`: the first offset of each, per partition).

mod record;

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::encode::ItemWriter;
use record::{OpenTrace, CLOSED_BY};

/// `turnaudit.htir.trace_gap`: the task steps a trace whose turn steps are `order` lacks
/// in its middle, and why it is not its task's turns in order (`None` when it is).
#[pyfunction]
pub(crate) fn trace_gap(order: Vec<i64>) -> (Vec<i64>, Option<String>) {
    record::trace_gap(&order)
}

// A `TaskTurn`'s fields, by position.
const TASK_ID: usize = 0;
const TASK_FAMILY: usize = 1;
const TASK_STEP: usize = 2;
const END_OF_TASK: usize = 3;
const SESSION_ID: usize = 4;
const RUNTIME: usize = 5;
const EVENT_ID: usize = 6;
const SEQUENCE: usize = 7;
const STEPS: usize = 8;
const TOPIC: usize = 9;
const PARTITION: usize = 10;
const OFFSET: usize = 11;

/// One task turn as the store takes it: from a `TaskTurn` (`add_task_turns`) or straight
/// from a scanned message (the consumer step's `traces` outlet, `verify::consume`).
pub(crate) struct TurnIn<'a, 'py> {
    pub(crate) task_id: &'a str,
    pub(crate) task_family: &'a str,
    pub(crate) task_step: i64,
    pub(crate) end_of_task: bool,
    pub(crate) session_id: &'a str,
    pub(crate) runtime_name: &'a str,
    pub(crate) runtime_version: &'a str,
    pub(crate) event_id: &'a str,
    pub(crate) sequence: i64,
    /// Its steps as the step rule made them (dicts, without indices).
    pub(crate) steps: Bound<'py, PyList>,
    pub(crate) topic: &'a str,
    pub(crate) partition: i64,
    pub(crate) offset: i64,
}

#[pyclass(module = "turnaudit._native")]
pub(crate) struct TraceStore {
    steps: ItemWriter,
    /// A step the native encoder does not write as surely as fastavro: fastavro's bytes.
    fallback: Py<PyAny>,
    header: Vec<u8>,
    /// `tuple.__new__` and `EncodedTrace`: a closed trace as Python reads it.
    tuple_new: Py<PyAny>,
    closed_type: Py<PyAny>,
    open: HashMap<String, OpenTrace>,
    opened: u64,
    partial_turns_skipped: u64,
}

impl TraceStore {
    /// The trace closed as `closed_by` (an index of `CLOSED_BY`), as an `EncodedTrace`.
    fn closed<'py>(&self, py: Python<'py>, task_id: &str, trace: &OpenTrace, closed_by: usize) -> PyResult<Bound<'py, PyAny>> {
        let (missing, gap) = record::trace_gap(&trace.turn_order);
        let value = PyBytes::new(py, &trace.record(&self.header, task_id, closed_by, &missing));
        let (partition, first_offset) = trace.first_read();
        let fields = PyTuple::new(
            py,
            [
                PyString::new(py, task_id).into_any(),
                value.into_any(),
                PyString::new(py, CLOSED_BY[closed_by]).into_any(),
                gap.into_pyobject(py)?.into_any(),
                PyTuple::new(py, &missing)?.into_any(),
                partition.into_pyobject(py)?.into_any(),
                first_offset.into_pyobject(py)?.into_any(),
            ],
        )?;
        self.tuple_new.bind(py).call1((self.closed_type.bind(py), fields))
    }

    /// Take the open traces `pick` chooses, in the order they opened.
    fn take_open(&mut self, pick: impl Fn(&OpenTrace) -> bool) -> Vec<(String, OpenTrace)> {
        let ids: Vec<String> = self.open.iter().filter(|(_, t)| pick(t)).map(|(id, _)| id.clone()).collect();
        let mut taken: Vec<(String, OpenTrace)> = ids.into_iter().filter_map(|id| self.open.remove_entry(&id)).collect();
        taken.sort_by_key(|(_, t)| t.serial);
        taken
    }

    fn close_taken<'py>(&self, py: Python<'py>, taken: Vec<(String, OpenTrace)>, closed_by: usize) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (task_id, trace) in &taken {
            out.append(self.closed(py, task_id, trace, closed_by)?)?;
        }
        Ok(out)
    }

    /// One turn's steps written into `trace` (numbered on from its last), or nothing for a
    /// turn already in it (an at-least-once redelivery).
    fn join(&self, py: Python<'_>, trace: &mut OpenTrace, turn: &TurnIn<'_, '_>) -> PyResult<()> {
        if trace.event_ids.iter().any(|id| id == turn.event_id) {
            return Ok(());
        }
        let (index_key, kind_key, task_step_key) = (intern!(py, "index"), intern!(py, "kind"), intern!(py, "task_step"));
        let (at, order_at) = (trace.steps.len(), trace.turn_order.len());
        let mut index = trace.step_count;
        let written = turn.steps.iter().try_for_each(|step| -> PyResult<()> {
            let step = step.cast::<PyDict>()?;
            step.set_item(index_key, index)?; // numbered in place, as the turn's own steps
            let start = trace.steps.len();
            if self.steps.write(py, step.as_any(), &mut trace.steps).is_err() {
                trace.steps.truncate(start);
                let bytes = self.fallback.bind(py).call1((step,))?;
                trace.steps.extend_from_slice(bytes.cast::<PyBytes>()?.as_bytes());
            }
            let kind = step.get_item(kind_key)?;
            if kind.as_ref().map(|k| k.cast::<PyString>().map(|s| s.to_str().ok() == Some("turn"))).transpose()? == Some(true) {
                let task_step = step.get_item(task_step_key)?.ok_or_else(|| PyValueError::new_err("a turn step without its task step"))?;
                trace.turn_order.push(task_step.extract()?);
            }
            index += 1;
            Ok(())
        });
        if let Err(error) = written {
            // A step the trace cannot hold: the trace is as it was before this turn.
            trace.steps.truncate(at);
            trace.turn_order.truncate(order_at);
            return Err(error);
        }
        trace.step_count = index;
        trace.sequences.push(turn.sequence);
        trace.turn_offsets.push((turn.partition, turn.offset));
        trace.event_ids.push(turn.event_id.to_owned());
        Ok(())
    }

    /// Add one task turn seen at `now`: the trace its end of task closed, if it did.
    pub(crate) fn add_turn<'py>(&mut self, py: Python<'py>, turn: &TurnIn<'_, 'py>, now: f64) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut trace = match self.open.remove(turn.task_id) {
            Some(trace) => trace,
            None => {
                if turn.task_step != 0 {
                    self.partial_turns_skipped += 1;
                    return Ok(None);
                }
                self.opened += 1;
                OpenTrace {
                    serial: self.opened,
                    task_family: turn.task_family.to_owned(),
                    session_id: turn.session_id.to_owned(),
                    topic: turn.topic.to_owned(),
                    partition: turn.partition,
                    runtime_name: turn.runtime_name.to_owned(),
                    runtime_version: turn.runtime_version.to_owned(),
                    steps: Vec::new(),
                    step_count: 0,
                    turn_order: Vec::new(),
                    sequences: Vec::new(),
                    event_ids: Vec::new(),
                    turn_offsets: Vec::new(),
                    last_seen: now,
                }
            }
        };
        let existed = !trace.event_ids.is_empty();
        if let Err(error) = self.join(py, &mut trace, turn) {
            if existed {
                self.open.insert(turn.task_id.to_owned(), trace);
            }
            return Err(error);
        }
        trace.last_seen = now;
        if turn.end_of_task {
            return Ok(Some(self.closed(py, turn.task_id, &trace, 0)?));
        }
        self.open.insert(turn.task_id.to_owned(), trace);
        Ok(None)
    }
}

fn runtime_text(runtime: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    // `runtime.get(name, "")`: a mapping, as the decoded event holds it.
    runtime.call_method1(intern!(runtime.py(), "get"), (name, ""))?.extract()
}

#[pymethods]
impl TraceStore {
    /// `TraceStore(schema, header, fallback, tuple_new, closed_type)`: `schema`, the trace's
    /// writer schema as `json.loads` gives it; `header`, its single-object header;
    /// `fallback`, a step dict's bytes by fastavro; `tuple_new` and `closed_type`,
    /// `tuple.__new__` and `EncodedTrace`.
    #[new]
    fn new(py: Python<'_>, schema: &Bound<'_, PyAny>, header: Vec<u8>, fallback: Py<PyAny>, tuple_new: Py<PyAny>, closed_type: Py<PyAny>) -> PyResult<Self> {
        Ok(TraceStore {
            steps: ItemWriter::new(py, schema, "steps")?,
            fallback,
            header,
            tuple_new,
            closed_type,
            open: HashMap::new(),
            opened: 0,
            partial_turns_skipped: 0,
        })
    }

    /// Add a run of task turns (`TaskTurn`s) seen at `now`: the traces their ends of task
    /// closed (`EncodedTrace`s), in order.
    fn add_task_turns<'py>(&mut self, py: Python<'py>, turns: &Bound<'py, PyAny>, now: f64) -> PyResult<Bound<'py, PyList>> {
        let closed = PyList::empty(py);
        for turn in turns.try_iter()? {
            let turn = turn?;
            let turn = turn.cast::<PyTuple>()?;
            let text = |at: usize| -> PyResult<String> { turn.get_item(at)?.extract() };
            let runtime = turn.get_item(RUNTIME)?;
            let (task_id, task_family, session_id, event_id, topic) = (text(TASK_ID)?, text(TASK_FAMILY)?, text(SESSION_ID)?, text(EVENT_ID)?, text(TOPIC)?);
            let (runtime_name, runtime_version) = (runtime_text(&runtime, "name")?, runtime_text(&runtime, "version")?);
            let steps = turn.get_item(STEPS)?;
            let turn_in = TurnIn {
                task_id: &task_id,
                task_family: &task_family,
                task_step: turn.get_item(TASK_STEP)?.extract()?,
                end_of_task: turn.get_item(END_OF_TASK)?.is_truthy()?,
                session_id: &session_id,
                runtime_name: &runtime_name,
                runtime_version: &runtime_version,
                event_id: &event_id,
                sequence: turn.get_item(SEQUENCE)?.extract()?,
                steps: steps.cast::<PyList>()?.clone(),
                topic: &topic,
                partition: turn.get_item(PARTITION)?.extract()?,
                offset: turn.get_item(OFFSET)?.extract()?,
            };
            if let Some(trace) = self.add_turn(py, &turn_in, now)? {
                closed.append(trace)?;
            }
        }
        Ok(closed)
    }

    /// Close the traces that saw no turn since `cutoff` (idle), in the order they opened.
    fn expire<'py>(&mut self, py: Python<'py>, cutoff: f64) -> PyResult<Bound<'py, PyList>> {
        let taken = self.take_open(|t| t.last_seen <= cutoff);
        self.close_taken(py, taken, 1)
    }

    /// Close every open trace as `closed_by` (a `TraceClose` value), in the order they opened.
    fn close_all<'py>(&mut self, py: Python<'py>, closed_by: &str) -> PyResult<Bound<'py, PyList>> {
        let at = CLOSED_BY.iter().position(|c| *c == closed_by).ok_or_else(|| PyValueError::new_err(format!("no trace closes as {closed_by:?}")))?;
        let taken = self.take_open(|_| true);
        self.close_taken(py, taken, at)
    }

    /// Drop the open traces of sessions on `partitions` (now another reader's, who
    /// rebuilds them from step 0): their task ids, in the order they opened.
    fn forget_partitions(&mut self, partitions: Vec<i64>) -> Vec<String> {
        self.take_open(|t| partitions.contains(&t.partition)).into_iter().map(|(id, _)| id).collect()
    }

    /// Per partition, the first offset an open trace needs read again after a crash.
    fn held_offsets(&self) -> HashMap<i64, i64> {
        let mut held: HashMap<i64, i64> = HashMap::new();
        for trace in self.open.values() {
            let (partition, offset) = trace.first_read();
            held.entry(partition).and_modify(|o| *o = (*o).min(offset)).or_insert(offset);
        }
        held
    }

    /// Where each open trace's first turn was read (task id, partition, offset), in the
    /// order they opened: what `held_offsets` takes the least of.
    fn first_reads(&self) -> Vec<(String, i64, i64)> {
        let mut open: Vec<(&String, &OpenTrace)> = self.open.iter().collect();
        open.sort_by_key(|(_, t)| t.serial);
        open.into_iter().map(|(id, t)| (id.clone(), t.first_read().0, t.first_read().1)).collect()
    }

    /// The open traces' task ids, in the order they opened.
    fn open_task_ids(&self) -> Vec<String> {
        let mut open: Vec<(&String, u64)> = self.open.iter().map(|(id, t)| (id, t.serial)).collect();
        open.sort_by_key(|&(_, serial)| serial);
        open.into_iter().map(|(id, _)| id.clone()).collect()
    }

    fn is_open(&self, task_id: &str) -> bool {
        self.open.contains_key(task_id)
    }

    #[getter]
    fn open_traces(&self) -> usize {
        self.open.len()
    }

    /// Turns of tasks first seen after their step 0 (their trace was published already).
    #[getter]
    fn partial_turns_skipped(&self) -> u64 {
        self.partial_turns_skipped
    }
}
