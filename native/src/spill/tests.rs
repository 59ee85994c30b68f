//! The id spill's run files on disk (a scratch directory per test): records read back
//! as written, a damaged file refused, a run found by id, runs merged keeping the
//! oldest copy of each id.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::runs::{merge_runs, read_record, write_record, Run, RunWriter, Seen};

/// A fresh directory under the system's temporary one, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("turnaudit-native-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn seen(i: u64, run: u64) -> Seen {
    Seen {
        hash: format!("{:016x}", i.wrapping_mul(0x9e37_79b9) ^ run),
        partition: (!i.is_multiple_of(3)).then_some((i % 7) as i64),
        offset: (!i.is_multiple_of(5)).then_some(i as i64 * 10 + run as i64),
    }
}

fn run_of(dir: &Scratch, name: &str, records: &BTreeMap<String, Seen>) -> Run {
    let mut writer = RunWriter::create(dir.0.join(name)).expect("created");
    for (id, s) in records {
        writer.push(id, s).expect("written");
    }
    writer.finish(0).expect("finished")
}

#[test]
fn a_record_reads_back_as_written_and_a_cut_one_is_refused() {
    for i in 0..300u64 {
        let id = format!("ëvent-{i}");
        let s = seen(i, 0);
        let mut bytes = Vec::new();
        let n = write_record(&mut bytes, &id, &s).expect("written");
        assert_eq!(n as usize, bytes.len());
        assert_eq!(read_record(&mut bytes.as_slice()).expect("read"), Some((id, s)));
        assert_eq!(read_record(&mut &b""[..]).expect("a clean end"), None);
        // Cut past its length prefix (a cut inside those four bytes reads as the end).
        for cut in 4..bytes.len() {
            assert!(read_record(&mut &bytes[..cut]).is_err(), "cut at {cut} read as whole");
        }
    }
}

#[test]
fn a_run_finds_each_id_it_holds_and_no_other() {
    let dir = Scratch::new("find");
    let records: BTreeMap<String, Seen> = (0..1000u64).map(|i| (format!("id-{:05}", i * 2), seen(i, 1))).collect();
    let run = run_of(&dir, "run", &records);
    assert_eq!(run.count, records.len() as u64);
    for (id, s) in &records {
        assert_eq!(run.find(id).expect("read").as_ref(), Some(s), "{id}");
    }
    for absent in ["id-00001", "id-01999", "a", "id-99999", ""] {
        assert_eq!(run.find(absent).expect("read"), None, "{absent}");
    }
    let mut reader = run.records().expect("opened");
    let mut back = BTreeMap::new();
    while let Some((id, s)) = reader.next().expect("read") {
        back.insert(id, s);
    }
    assert_eq!(back, records);
}

#[test]
fn merged_runs_hold_each_id_once_with_the_oldest_copy() {
    let dir = Scratch::new("merge");
    let mut expected: BTreeMap<String, Seen> = BTreeMap::new();
    let mut runs = Vec::new();
    for r in 0..5u64 {
        // Overlapping ranges: ids 100r..100r+300, step r+1.
        let records: BTreeMap<String, Seen> =
            (100 * r..100 * r + 300).step_by(r as usize + 1).map(|i| (format!("{i:06}"), seen(i, r))).collect();
        for (id, s) in &records {
            expected.entry(id.clone()).or_insert_with(|| s.clone()); // oldest run first
        }
        runs.push(run_of(&dir, &format!("run-{r}"), &records));
    }
    let merged = merge_runs(&runs, dir.0.join("merged"), 1).expect("merged");
    assert_eq!(merged.count, expected.len() as u64);
    assert_eq!(merged.level, 1);
    let mut reader = merged.records().expect("opened");
    let mut back = BTreeMap::new();
    while let Some((id, s)) = reader.next().expect("read") {
        assert!(back.insert(id, s).is_none(), "an id twice");
    }
    assert_eq!(back, expected);
}

#[test]
fn a_damaged_run_file_is_an_error_not_a_wrong_answer() {
    let dir = Scratch::new("damage");
    let records: BTreeMap<String, Seen> = (0..200u64).map(|i| (format!("{i:04}"), seen(i, 0))).collect();
    let run = run_of(&dir, "run", &records);
    let bytes = std::fs::read(&run.path).expect("read");
    std::fs::write(&run.path, &bytes[..bytes.len() - 3]).expect("cut");
    let mut reader = run.records().expect("opened");
    let mut outcome = Ok(());
    for _ in 0..records.len() {
        match reader.next() {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    assert!(outcome.is_err(), "a cut run read to a clean end");
}
