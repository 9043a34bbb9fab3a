//! The recorded history: write ids and their value encoding, the events a client session issues,
//! the final reads, and the thread-safe [`Recorder`] and [`Session`] that build a [`History`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The identity of one write of a workload. Every write writes a value of its own, so a read's
/// value names the write it came from (see [`encode_value`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WriteId(pub u64);

impl fmt::Display for WriteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

/// The prefix of every encoded value.
const VALUE_PREFIX: &[u8] = b"w:";
/// Length of an encoded value: the prefix and 16 hex digits.
const VALUE_LEN: usize = VALUE_PREFIX.len() + 16;

/// The value a workload writes for `id`: `b"w:"` followed by the id as 16 lower-case hex digits.
/// Distinct ids give distinct values, and [`decode_value`] recognises them.
pub fn encode_value(id: WriteId) -> Vec<u8> {
    format!("w:{:016x}", id.0).into_bytes()
}

/// The write id a value was encoded from by [`encode_value`], or `None` if `value` is not such
/// an encoding (wrong length, prefix or digits; upper-case digits are accepted).
pub fn decode_value(value: &[u8]) -> Option<WriteId> {
    if value.len() != VALUE_LEN || !value.starts_with(VALUE_PREFIX) {
        return None;
    }
    let digits = std::str::from_utf8(&value[VALUE_PREFIX.len()..]).ok()?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok().map(WriteId)
}

/// A last-writer-wins timestamp `(time, writer)`: totally ordered, larger is newer.
pub type Ts = (u64, u64);

/// One version a read returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Observed {
    /// The write the version's value came from.
    pub write: WriteId,
    /// The version's LWW timestamp when the value type has one; `None` for causal multi-value
    /// types.
    pub ts: Option<Ts>,
}

impl Observed {
    /// A version of an LWW-ordered type with its timestamp.
    pub fn lww(write: WriteId, ts: Ts) -> Self {
        Self {
            write,
            ts: Some(ts),
        }
    }

    /// A version of a causal type, which has no total order.
    pub fn causal(write: WriteId) -> Self {
        Self { write, ts: None }
    }
}

/// What one op did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A read of `key`. `observed` is empty when the key was absent; more than one entry are the
    /// concurrent siblings of a causal register.
    Read {
        /// The key read.
        key: Vec<u8>,
        /// The versions the read returned.
        observed: Vec<Observed>,
    },
    /// A write of the value of `write` to `key`.
    Write {
        /// The key written.
        key: Vec<u8>,
        /// The write's id; unique in the history.
        write: WriteId,
        /// The timestamp when the client stamped the write itself; `None` when unknown (e.g.
        /// stamped by the server).
        ts: Option<Ts>,
    },
    /// The op's transaction committed.
    Commit,
    /// The op's transaction aborted.
    Abort,
}

/// One op of one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// The session that issued the op.
    pub session: u64,
    /// The transaction (of this session) the op belongs to, if any. A transaction's ops are
    /// followed by its [`Event::Commit`] or [`Event::Abort`]; one without either counts as
    /// aborted. `Commit` and `Abort` without a transaction are ignored.
    pub txn: Option<u64>,
    /// What the op did.
    pub event: Event,
    /// When the op was invoked and when its response arrived, if the recorder knew.
    pub span: Option<Span>,
}

/// When an operation was invoked and when its response arrived, in microseconds since a
/// point the recorder chose (its start). The checkers judge session and causal order, not
/// real time, so they only show spans in reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// When the client issued the operation.
    pub invoked_us: u64,
    /// When the client got its response.
    pub completed_us: u64,
}

impl Op {
    /// The key the op read or wrote; `None` for `Commit` and `Abort`.
    pub fn key(&self) -> Option<&[u8]> {
        match &self.event {
            Event::Read { key, .. } | Event::Write { key, .. } => Some(key),
            Event::Commit | Event::Abort => None,
        }
    }
}

/// The final state of every key: key → versions, as [`Event::Read::observed`].
pub type FinalState = BTreeMap<Vec<u8>, Vec<Observed>>;

/// A recorded history.
///
/// Each session's ops appear in `ops` in the order the session issued them; the sessions'
/// ops interleave arbitrarily.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// All ops, each session's in its issue order.
    pub ops: Vec<Op>,
    /// Optional reads of every key after the workload quiesced: one map per replica (for the
    /// convergence check), or a single map (the merged final state). A key that is absent is
    /// the same as a key read as empty.
    pub finals: Vec<FinalState>,
}

/// A thread-safe history recorder shared (in an [`Arc`]) by concurrent tasks.
#[derive(Debug, Default)]
pub struct Recorder {
    ops: Mutex<Vec<Op>>,
    next_write: AtomicU64,
}

impl Recorder {
    /// An empty recorder; write ids from [`Recorder::next_write`] start at 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh write id, unique among the ids this recorder hands out.
    pub fn next_write(&self) -> WriteId {
        WriteId(self.next_write.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Appends `op`. Call it after the op completed (for reads: with what it returned), from the
    /// session's own task, so that each session's ops stay in its issue order.
    pub fn record(&self, op: Op) {
        self.lock().push(op);
    }

    /// A copy of the history recorded so far, without finals.
    pub fn history(&self) -> History {
        History {
            ops: self.lock().clone(),
            finals: Vec::new(),
        }
    }

    /// The history recorded, without finals.
    pub fn into_history(self) -> History {
        let ops = self
            .ops
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        History {
            ops,
            finals: Vec::new(),
        }
    }

    /// The ops; a poisoned lock (a panicking recorder thread) still holds a consistent vector,
    /// since `push` is the only mutation.
    fn lock(&self) -> MutexGuard<'_, Vec<Op>> {
        self.ops
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One client session's view of a [`Recorder`]: stamps its session id and its current
/// transaction id on every op it records.
#[derive(Debug, Clone)]
pub struct Session {
    recorder: Arc<Recorder>,
    id: u64,
    next_txn: u64,
    txn: Option<u64>,
}

impl Session {
    /// Session `id` recording into `recorder`. Ids must be distinct among a history's sessions.
    pub fn new(recorder: Arc<Recorder>, id: u64) -> Self {
        Self {
            recorder,
            id,
            next_txn: 0,
            txn: None,
        }
    }

    /// The session id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The transaction in progress, if any.
    pub fn txn(&self) -> Option<u64> {
        self.txn
    }

    /// A fresh write id from the recorder.
    pub fn next_write(&self) -> WriteId {
        self.recorder.next_write()
    }

    /// Starts a transaction and returns its id. A transaction still in progress is left
    /// without an end, so it counts as aborted.
    pub fn begin(&mut self) -> u64 {
        let txn = self.next_txn;
        self.next_txn += 1;
        self.txn = Some(txn);
        txn
    }

    /// Records a read of `key` that returned `observed`.
    pub fn read(&self, key: &[u8], observed: Vec<Observed>) {
        self.record(Event::Read {
            key: key.to_vec(),
            observed,
        });
    }

    /// Records a write of `write` to `key`, stamped `ts` by the client if known.
    pub fn write(&self, key: &[u8], write: WriteId, ts: Option<Ts>) {
        self.record(Event::Write {
            key: key.to_vec(),
            write,
            ts,
        });
    }

    /// Records the commit of the transaction in progress and ends it; nothing outside one.
    pub fn commit(&mut self) {
        if self.txn.is_some() {
            self.record(Event::Commit);
            self.txn = None;
        }
    }

    /// Records the abort of the transaction in progress and ends it; nothing outside one.
    pub fn abort(&mut self) {
        if self.txn.is_some() {
            self.record(Event::Abort);
            self.txn = None;
        }
    }

    fn record(&self, event: Event) {
        self.recorder.record(Op {
            session: self.id,
            span: None,
            txn: self.txn,
            event,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_reject_others() {
        for id in [0, 1, 0xdead_beef, u64::MAX] {
            let value = encode_value(WriteId(id));
            assert_eq!(value.len(), VALUE_LEN);
            assert_eq!(decode_value(&value), Some(WriteId(id)));
        }
        assert_eq!(decode_value(b"w:00000000000000"), None);
        assert_eq!(decode_value(b"x:0000000000000001"), None);
        assert_eq!(decode_value(b"w:000000000000000g"), None);
        assert_eq!(decode_value(b"w:+000000000000001"), None);
        assert_eq!(decode_value(b""), None);
    }

    #[test]
    fn sessions_stamp_their_ids() {
        let recorder = Arc::new(Recorder::new());
        let mut s = Session::new(recorder.clone(), 7);
        let w = s.next_write();
        s.write(b"k", w, None);
        let t = s.begin();
        s.read(b"k", vec![Observed::causal(w)]);
        s.commit();
        s.commit();
        drop(s);
        let history = Arc::try_unwrap(recorder).map(Recorder::into_history);
        let Ok(history) = history else {
            panic!("recorder still shared")
        };
        assert_eq!(history.ops.len(), 3);
        assert_eq!(history.ops[0].txn, None);
        assert!(history.ops[1..]
            .iter()
            .all(|op| op.session == 7 && op.txn == Some(t)));
        assert_eq!(history.ops[2].event, Event::Commit);
    }

    #[test]
    fn concurrent_sessions_keep_their_order() {
        let recorder = Arc::new(Recorder::new());
        let threads: Vec<_> = (0..4)
            .map(|id| {
                let session = Session::new(recorder.clone(), id);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        session.write(b"k", session.next_write(), None);
                    }
                })
            })
            .collect();
        for thread in threads {
            assert!(thread.join().is_ok());
        }
        let history = recorder.history();
        assert_eq!(history.ops.len(), 4000);
        for id in 0..4 {
            let ids: Vec<u64> = history
                .ops
                .iter()
                .filter(|op| op.session == id)
                .filter_map(|op| match op.event {
                    Event::Write { write, .. } => Some(write.0),
                    _ => None,
                })
                .collect();
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
