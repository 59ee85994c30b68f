//! The scan against the full decoder, over the shipped turn schemas: random bodies of
//! every node kind (unions by negative index too, arrays and maps in several blocks,
//! negative block counts with sizes, multi-byte texts), mutated (bytes changed, cut,
//! inserted, invalid UTF-8). For each, with a random choice of fields kept and the rest
//! skipped: the scan refuses exactly what the decoder refuses (or what leaves bytes
//! after the record), and each kept field equals the decoder's value of it.

use pyo3::ffi::c_str;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyModule, PyString};

use super::scan::{scan, Names, V};
use crate::decode::{compile_schema, Decoder, Node, NodeId, Plan};

const SCHEMAS: [&str; 3] = [
    include_str!("../../../schemas/turn_event.v3.avsc"),
    include_str!("../../../schemas/turn_event.v4.avsc"),
    include_str!("../../../schemas/turn_event.v5.avsc"),
];
const SLOTS: usize = 64;

/// A small deterministic generator (xorshift64*): the same cases every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

fn long(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

const TEXTS: [&str; 6] = ["", "a", "MAIN", "STUB", "é€𝄞 mixed", "[unknown-domain]"];

/// Writes a random value of node `id`, valid for the schema.
fn write(plan: &Plan, id: NodeId, rng: &mut Rng, out: &mut Vec<u8>, depth: usize) {
    match &plan.nodes[id] {
        Node::Null | Node::Pending => {}
        Node::Boolean => out.push(if rng.chance(5) { 2 } else { rng.below(2) as u8 }),
        Node::Int | Node::Long => long(out, rng.next() as i64 >> rng.below(64)),
        Node::Float => out.extend_from_slice(&(rng.next() as u32).to_le_bytes()),
        Node::Double => out.extend_from_slice(&rng.next().to_le_bytes()),
        Node::Bytes => {
            let n = rng.below(5) as usize;
            long(out, n as i64);
            out.extend((0..n).map(|_| rng.next() as u8));
        }
        Node::String => {
            let t = TEXTS[rng.below(TEXTS.len() as u64) as usize];
            long(out, t.len() as i64);
            out.extend_from_slice(t.as_bytes());
        }
        Node::Fixed(size) => out.extend((0..*size).map(|_| rng.next() as u8)),
        Node::Enum(symbols) => {
            let len = symbols.len() as i64;
            let i = rng.below(symbols.len() as u64) as i64;
            long(out, if rng.chance(4) { i - len } else { i }); // Python-style negative too
        }
        Node::Union(branches) => {
            let len = branches.len() as i64;
            let i = rng.below(branches.len() as u64) as i64;
            long(out, if rng.chance(4) { i - len } else { i });
            write(plan, branches[i as usize], rng, out, depth + 1);
        }
        Node::Record(fields) => {
            for f in fields {
                write(plan, f.node, rng, out, depth + 1);
            }
        }
        Node::Array(item) | Node::Map(item) => {
            let is_map = matches!(plan.nodes[id], Node::Map(_));
            let blocks = if depth > 6 { 0 } else { rng.below(3) };
            for _ in 0..blocks {
                let count = 1 + rng.below(3) as i64;
                let mut items = Vec::new();
                for _ in 0..count {
                    if is_map {
                        let key = TEXTS[rng.below(TEXTS.len() as u64) as usize];
                        long(&mut items, key.len() as i64);
                        items.extend_from_slice(key.as_bytes());
                    }
                    write(plan, *item, rng, &mut items, depth + 1);
                }
                if rng.chance(3) {
                    long(out, -count); // a negative count, then the block's size
                    long(out, items.len() as i64);
                } else {
                    long(out, count);
                }
                out.extend_from_slice(&items);
            }
            long(out, 0);
        }
    }
}

/// Damage: bytes changed, cut, inserted (a stray 0xff or 0xc3 breaks UTF-8 and varints).
fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(data.len() as u64 + 1) as usize;
        match rng.below(4) {
            0 if at < data.len() => data[at] = rng.next() as u8,
            1 => data.truncate(at),
            2 => data.insert(at, [0xff, 0xc3, 0x80, 0x00, 0x01][rng.below(5) as usize]),
            _ => data.push(rng.next() as u8),
        }
    }
}

/// Whether a kept value is the decoder's Python value (floats bit for bit, NaN too).
fn equal(v: &V<'_>, obj: &Bound<'_, PyAny>) -> bool {
    match v {
        V::Null => obj.is_none(),
        V::Bool(b) => obj.cast::<PyBool>().is_ok_and(|o| o.is_true() == *b),
        V::Int(i) => obj.cast::<PyInt>().is_ok() && !obj.is_instance_of::<PyBool>() && obj.extract::<i64>().is_ok_and(|o| o == *i),
        V::Float(f) => obj.cast::<PyFloat>().is_ok_and(|o| o.value().to_bits() == f.to_bits()),
        V::Str(s) => obj.cast::<PyString>().is_ok_and(|o| o.to_str().is_ok_and(|o| o == *s)),
        V::Bytes(b) => obj.cast::<PyBytes>().is_ok_and(|o| o.as_bytes() == *b),
        V::List(items) => obj.cast::<PyList>().is_ok_and(|o| {
            o.len() == items.len() && items.iter().zip(o.iter()).all(|(v, o)| equal(v, &o))
        }),
        V::Fields(fields) => obj.cast::<PyDict>().is_ok_and(|o| {
            o.len() == fields.len()
                && fields.iter().all(|(k, v)| o.get_item(k).ok().flatten().is_some_and(|o| equal(v, &o)))
        }),
    }
}

#[test]
fn the_scan_refuses_what_the_decoder_refuses_and_keeps_its_values() {
    Python::initialize();
    Python::attach(|py| {
        let strip = PyModule::from_code(
            py,
            c_str!(
                "import json\n\
                 def schema(text):\n\
                 \x20   def strip(n):\n\
                 \x20       if isinstance(n, list): return [strip(v) for v in n]\n\
                 \x20       if not isinstance(n, dict): return n\n\
                 \x20       return {k: strip(v) for k, v in n.items() if k != 'logicalType'}\n\
                 \x20   return strip(json.loads(text))\n"
            ),
            c_str!("strip.py"),
            c_str!("strip"),
        )
        .expect("the helper compiles");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut refused, mut kept) = (0, 0);
        for text in SCHEMAS {
            let schema = strip.getattr("schema").and_then(|f| f.call1((text,))).expect("a schema");
            let (mut nodes, root) = compile_schema(py, &schema).expect("compiles");
            // The time field held to a range, as the shipped decoders hold it.
            if let Node::Record(fields) = &mut nodes[root] {
                for f in fields.iter_mut() {
                    f.millis_range = f.name.bind(py).to_str().is_ok_and(|n| n == "occurred_at");
                }
            }
            let decoder = Decoder { plan: Plan { nodes, root, min_millis: -(1 << 40), max_millis: 1 << 40 } };
            let plan = &decoder.plan;
            let names = Names::of(py, plan).expect("names");
            let top = names.top(plan).len();
            assert!(top <= SLOTS);
            for case in 0..4000 {
                let mut payload = Vec::new();
                write(plan, root, &mut rng, &mut payload, 0);
                if case % 2 == 1 {
                    mutate(&mut rng, &mut payload);
                }
                let wanted: Vec<Option<usize>> = (0..top).map(|i| (!rng.chance(2)).then_some(i)).collect();
                let scanned = scan::<SLOTS>(plan, &names, &wanted, &payload, 0);
                let decoded = decoder.run(py, &payload, 0).ok().filter(|(_, end)| *end == payload.len());
                assert_eq!(scanned.is_some(), decoded.is_some(), "case {case}: {payload:?}");
                let (Some(scanned), Some((decoded, _))) = (scanned, decoded) else {
                    refused += 1;
                    continue;
                };
                let decoded = decoded.bind(py).cast::<PyDict>().expect("a record").clone();
                for (i, name) in names.top(plan).iter().enumerate() {
                    let value = decoded.get_item(name).expect("get").expect("every field");
                    match &scanned[i] {
                        Some(v) => assert!(equal(v, &value), "case {case}: {name} differs"),
                        None => assert!(wanted[i].is_none(), "case {case}: {name} kept but missing"),
                    }
                }
                kept += 1;
            }
        }
        // Both sides were exercised.
        assert!(refused > 1000 && kept > 1000, "refused {refused}, kept {kept}");
    });
}
