//! What crosses a process boundary in protobuf form, for the peer plane and the write-ahead
//! log: records of keys ([`GossipBatch`] ⇄ `Gossip.Entry`), journal payloads (records and
//! drops), and operations forwarded between nodes (`Op` and [`OpResult`] ⇄ `ForwardOp` /
//! `ForwardResult`), so a node runs a request on another node's worker exactly as it would
//! locally.
//!
//! Everything decoded here comes from the network or a file: malformed input is an error
//! (or, for single entries of a batch, skipped), never a panic.

use bytes::Bytes;
use lattice::{LatticeType, Record};
use prost::Message;
use wire::convert::{value_from_pb, value_to_pb};
use wire::pb::{self, forward_result::Result as R};

use crate::error::NodeError;
use crate::op::OpResult;

#[path = "codec_ops.rs"]
mod ops;
pub use ops::{op_from_pb, op_to_pb};

/// One batch of records for one destination: keys and records to merge there.
pub type GossipBatch = Vec<(Bytes, Record)>;

/// Records as `Gossip.Entry`s.
pub fn encode_entries(batch: &GossipBatch) -> Vec<pb::gossip::Entry> {
    batch
        .iter()
        .map(|(key, record)| pb::gossip::Entry {
            key: key.clone(),
            record: Some(wire::convert::record_to_pb(record)),
        })
        .collect()
}

/// Records from `Gossip.Entry`s; entries without a record or whose record does not decode
/// are dropped (anti-entropy repairs them if they mattered).
pub fn decode_entries(entries: Vec<pb::gossip::Entry>) -> GossipBatch {
    entries
        .into_iter()
        .filter_map(|e| {
            let record = wire::convert::record_from_pb(e.record.as_ref()?).ok()?;
            Some((e.key, record))
        })
        .collect()
}

/// One change journaled to a worker's write-ahead log.
#[derive(Clone, Debug, PartialEq)]
pub enum JournalEntry {
    /// A record merged into the key.
    Merge(Bytes, Record),
    /// The key removed from this worker (handed off, or its tombstone reclaimed).
    Drop(Bytes),
}

impl JournalEntry {
    /// The key the change is about.
    pub fn key(&self) -> &Bytes {
        match self {
            JournalEntry::Merge(k, _) | JournalEntry::Drop(k) => k,
        }
    }
}

/// Encodes journal entries as one log payload: a `Replicate` message whose entries are the
/// merges, and entries *without* a record for drops (never sent that way on the network),
/// in order.
pub fn encode_journal(entries: &[JournalEntry]) -> Bytes {
    let msg = pb::Replicate {
        entries: entries.iter().map(journal_entry_to_pb).collect(),
        ..Default::default()
    };
    Bytes::from(msg.encode_to_vec())
}

/// Encodes `entries` as [`encode_journal`] does, split into payloads of at most about
/// `max_bytes` each (one entry larger than that gets a payload of its own), in order.
/// Each entry replays on its own, so a log record needs no more than a batch of them.
pub fn encode_journal_chunks(entries: &[JournalEntry], max_bytes: usize) -> Vec<Bytes> {
    let mut buf = crate::codec_journal::JournalBuf::with_max_payload(max_bytes);
    for e in entries {
        match e {
            JournalEntry::Merge(key, record) => buf.push_merge(key, record),
            JournalEntry::Drop(key) => buf.push_drop(key),
        }
    }
    buf.take()
}

fn journal_entry_to_pb(e: &JournalEntry) -> pb::gossip::Entry {
    match e {
        JournalEntry::Merge(key, record) => pb::gossip::Entry {
            key: key.clone(),
            record: Some(wire::convert::record_to_pb(record)),
        },
        JournalEntry::Drop(key) => pb::gossip::Entry {
            key: key.clone(),
            record: None,
        },
    }
}

/// Decodes a log payload written by [`encode_journal`] (or by earlier versions, whose
/// payloads hold merges only).
pub fn decode_journal(payload: &[u8]) -> Result<Vec<JournalEntry>, NodeError> {
    let msg = pb::Replicate::decode(payload)
        .map_err(|e| NodeError::BadRequest(format!("undecodable log record: {e}")))?;
    msg.entries
        .into_iter()
        .map(|e| match e.record {
            None => Ok(JournalEntry::Drop(e.key)),
            Some(r) => wire::convert::record_from_pb(&r)
                .map(|record| JournalEntry::Merge(e.key, record))
                .map_err(|err| NodeError::BadRequest(format!("undecodable log record: {err}"))),
        })
        .collect()
}

/// Encodes a result.
pub fn result_to_pb(r: &OpResult) -> pb::ForwardResult {
    let result = match r {
        OpResult::Value(v) => R::Value(pb::GetResult {
            value: v.as_ref().map(value_to_pb),
        }),
        OpResult::Int(n) => R::Int(*n),
        OpResult::Type(t) => R::Type(t.map_or(pb::LatticeType::Unspecified, |t| {
            pb::LatticeType::try_from(t as i32).unwrap_or(pb::LatticeType::Unspecified)
        }) as i32),
        OpResult::Done => R::Done(true),
        OpResult::Multi(results) => R::Multi(pb::ForwardResults {
            results: results.iter().map(result_to_pb).collect(),
        }),
        OpResult::Reply(b) => R::Reply(b.clone()),
        OpResult::Error(e) => R::Error(e.to_pb()),
    };
    pb::ForwardResult {
        result: Some(result),
    }
}

/// Decodes a result.
pub fn result_from_pb(r: pb::ForwardResult) -> OpResult {
    let unavailable = |what: &str| OpResult::Error(NodeError::Unavailable(what.to_string()));
    match r.result {
        Some(R::Value(g)) => match g.value.as_ref().map(value_from_pb).transpose() {
            Ok(v) => OpResult::Value(v),
            Err(e) => unavailable(&format!("bad value from a peer: {e}")),
        },
        Some(R::Int(n)) => OpResult::Int(n),
        Some(R::Type(t)) => OpResult::Type(u8::try_from(t).ok().and_then(LatticeType::from_u8)),
        Some(R::Done(_)) => OpResult::Done,
        Some(R::Multi(m)) => OpResult::Multi(m.results.into_iter().map(result_from_pb).collect()),
        Some(R::Reply(b)) => OpResult::Reply(b),
        Some(R::Error(e)) => OpResult::Error(error_from_pb(e)),
        None => unavailable("empty result from a peer"),
    }
}

/// A peer's error as a node error (so it reaches the client with its meaning).
pub fn error_from_pb(e: pb::Error) -> NodeError {
    use pb::ErrorCode as C;
    match C::try_from(e.code).unwrap_or(C::Unspecified) {
        C::Redirect => NodeError::Redirect(e.redirect),
        C::ShuttingDown => NodeError::ShuttingDown,
        C::BadRequest => NodeError::BadRequest(e.message),
        C::InvalidArgument => NodeError::InvalidArgument(e.message),
        // The remaining errors are answered to the client with the peer's own wording.
        _ => NodeError::Remote {
            code: e.code,
            message: e.message,
        },
    }
}

#[cfg(test)]
#[path = "codec_journal_tests.rs"]
mod journal_buf_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{Condition, Deadline, ExpireWhen, Guard, Op};
    use lattice::{Max, Value};

    #[test]
    fn journal_payloads_keep_merges_and_drops_in_order() {
        let ts = lattice::Timestamp::new(7 << 16, 3);
        let entries = vec![
            JournalEntry::Merge(
                Bytes::from_static(b"a"),
                Record::new(ts, Some(Value::Max(Max(4)))),
            ),
            JournalEntry::Drop(Bytes::from_static(b"a")),
            JournalEntry::Merge(Bytes::from_static(b"b"), Record::tombstone(ts)),
        ];
        assert_eq!(decode_journal(&encode_journal(&entries)).unwrap(), entries);
        assert!(decode_journal(b"\xff\xff").is_err());
        // Gossip never carries drops: an entry without a record is skipped.
        let batch = decode_entries(vec![pb::gossip::Entry {
            key: Bytes::from_static(b"x"),
            record: None,
        }]);
        assert!(batch.is_empty());
    }

    #[test]
    fn journal_chunks_stay_under_the_bound_and_keep_the_order() {
        let ts = lattice::Timestamp::new(7 << 16, 3);
        let entries: Vec<JournalEntry> = (0..1000u32)
            .map(|i| {
                let key = Bytes::from(format!("key-{i}"));
                if i % 7 == 0 {
                    JournalEntry::Drop(key)
                } else {
                    JournalEntry::Merge(key, Record::new(ts, Some(Value::Max(Max(i.into())))))
                }
            })
            .collect();
        let chunks = encode_journal_chunks(&entries, 1000);
        assert!(chunks.len() > 10, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.len() <= 1000));
        let back: Vec<JournalEntry> = chunks
            .iter()
            .flat_map(|c| decode_journal(c).unwrap())
            .collect();
        assert_eq!(back, entries);
        assert_eq!(
            encode_journal_chunks(&entries, usize::MAX),
            vec![encode_journal(&entries)]
        );
        // One entry over the bound gets a payload of its own.
        let big = encode_journal_chunks(&entries[1..3], 10);
        assert_eq!(big.len(), 2);
        assert!(encode_journal_chunks(&[], 10).is_empty());
    }

    #[test]
    fn ops_and_results_round_trip() {
        let k = Bytes::from_static(b"k");
        let ops = vec![
            Op::Get { key: k.clone() },
            Op::GetMeta { key: k.clone() },
            Op::Exists { key: k.clone() },
            Op::TypeOf { key: k.clone() },
            Op::SetContains {
                key: k.clone(),
                member: Bytes::from_static(b"m"),
            },
            Op::SetLen { key: k.clone() },
            Op::Put {
                key: k.clone(),
                value: Value::Max(Max(3)),
            },
            Op::Delete { key: k.clone() },
            Op::Assign {
                key: k.clone(),
                value: Bytes::from_static(b"v"),
                condition: Condition::IfAbsent,
            },
            Op::SetAdd {
                key: k.clone(),
                members: vec![Bytes::from_static(b"a")],
            },
            Op::SetRemove {
                key: k.clone(),
                members: vec![Bytes::from_static(b"a")],
            },
            Op::CounterAdd {
                key: k.clone(),
                delta: -4,
            },
            Op::GetSet {
                key: k.clone(),
                value: Bytes::from_static(b"v"),
            },
            Op::GetDel { key: k.clone() },
            Op::Append {
                key: k.clone(),
                value: Bytes::from_static(b"v"),
            },
            Op::SetRange {
                key: k.clone(),
                offset: 7,
                value: Bytes::from_static(b"v"),
            },
            Op::IncrByFloat {
                key: k.clone(),
                by: -1.5,
            },
            Op::IncrBy {
                key: k.clone(),
                delta: 9,
            },
            Op::AssignTtl {
                key: k.clone(),
                value: Bytes::from_static(b"v"),
                condition: Condition::IfPresent,
                deadline: Deadline::In(1500),
            },
            Op::Expire {
                key: k.clone(),
                deadline: Deadline::At(1_700_000_000_000),
                when: ExpireWhen::Gt,
            },
            Op::Expire {
                key: k.clone(),
                deadline: Deadline::Persist,
                when: ExpireWhen::Always,
            },
            Op::Ttl { key: k.clone() },
            Op::GetEx {
                key: k.clone(),
                deadline: None,
            },
            Op::GetEx {
                key: k.clone(),
                deadline: Some(Deadline::Keep),
            },
            Op::Version { key: k.clone() },
            Op::Exec {
                key: k.clone(),
                guards: vec![
                    (k.clone(), Guard::Version(u64::MAX)),
                    (Bytes::from_static(b"j"), Guard::Absent),
                ],
                ops: vec![
                    Op::Get { key: k.clone() },
                    Op::CounterAdd {
                        key: k.clone(),
                        delta: 2,
                    },
                ],
            },
            // keys and sets
            Op::SetPop {
                key: k.clone(),
                count: 3,
            },
            Op::ExpireTime { key: k.clone() },
            Op::Script {
                key: k.clone(),
                body: Bytes::from_static(b"return 1"),
                keys: vec![k.clone(), Bytes::from_static(b"j")],
                args: vec![Bytes::from_static(b"a")],
                read_only: true,
                resp3: false,
            },
            Op::Script {
                key: k,
                body: Bytes::from_static(b"return 2"),
                keys: vec![],
                args: vec![],
                read_only: false,
                resp3: true,
            },
        ];
        for op in ops {
            assert_eq!(op_from_pb(op_to_pb(&op)).unwrap(), op);
        }
        for r in [
            OpResult::Value(Some(Value::Max(Max(1)))),
            OpResult::Value(None),
            OpResult::Int(-3),
            OpResult::Type(Some(LatticeType::OrSet)),
            OpResult::Type(None),
            OpResult::Done,
            OpResult::Multi(vec![OpResult::Int(1), OpResult::Value(None)]),
            OpResult::Reply(Bytes::from_static(b"*1\r\n:1\r\n")),
            OpResult::Error(NodeError::Overflow),
        ] {
            let back = result_from_pb(result_to_pb(&r));
            match (&r, &back) {
                (OpResult::Error(a), OpResult::Error(b)) => {
                    assert_eq!(a.code(), b.code());
                    assert_eq!(a.resp_message(), b.resp_message());
                }
                _ => assert_eq!(back, r),
            }
        }
    }
}
