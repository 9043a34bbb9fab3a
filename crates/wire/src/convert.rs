//! Conversion between protobuf messages and [`lattice`] values.
//!
//! Encoding is total. Decoding validates: a value with no variant set, a missing timestamp or
//! clock, or a map nested deeper than [`MAX_DEPTH`] is a [`ConvertError`], never a panic.
//! Decoded values are canonicalised by the lattice constructors, so a peer cannot inject a
//! non-canonical state.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use lattice::{
    Blob, Bool, CausalContext, CausalVersion, Counter, Dot, Expiry, FieldReg, Hash, Lww, Map, Max,
    Min, MultiKeyCausal, OrSet, OrderedSet, Priority, Record, Score, Set, SingleKeyCausal,
    SortedSet, Timestamp, Value, VectorClock,
};

use crate::pb;

/// Deepest nesting of `Map` values accepted from the network.
pub const MAX_DEPTH: usize = 32;

/// A protobuf message that does not describe a valid lattice value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A required field is absent.
    #[error("missing field `{0}`")]
    Missing(&'static str),
    /// Maps nested deeper than [`MAX_DEPTH`].
    #[error("value nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

fn blob(b: &Bytes) -> Blob {
    Box::from(&b[..])
}

fn bytes(b: &[u8]) -> Bytes {
    Bytes::copy_from_slice(b)
}

/// Encodes a timestamp.
pub fn timestamp_to_pb(ts: Timestamp) -> pb::Timestamp {
    pb::Timestamp {
        time: ts.time,
        writer: ts.writer,
    }
}

/// Decodes a timestamp.
pub fn timestamp_from_pb(ts: &pb::Timestamp) -> Timestamp {
    Timestamp::new(ts.time, ts.writer)
}

/// Encodes a vector clock.
pub fn clock_to_pb(vc: &VectorClock) -> pb::VectorClock {
    pb::VectorClock {
        entries: vc.iter().collect(),
    }
}

/// Decodes a vector clock (zero entries are dropped by the constructor).
pub fn clock_from_pb(vc: &pb::VectorClock) -> VectorClock {
    vc.entries.iter().map(|(&a, &c)| (a, c)).collect()
}

fn dot_to_pb(d: &Dot) -> pb::Dot {
    pb::Dot {
        actor: d.actor,
        counter: d.counter,
    }
}

fn dot_from_pb(d: &pb::Dot) -> Dot {
    Dot {
        actor: d.actor,
        counter: d.counter,
    }
}

/// Encodes a record (a tombstone has no value).
pub fn record_to_pb(r: &Record) -> pb::Record {
    pb::Record {
        epoch: Some(timestamp_to_pb(r.epoch)),
        value: r.value.as_ref().map(value_to_pb),
        expiry: r.expiry.as_ref().map(|e| pb::Expiry {
            ts: Some(timestamp_to_pb(e.ts)),
            at_ms: e.at_ms,
        }),
    }
}

/// Decodes a record.
pub fn record_from_pb(r: &pb::Record) -> Result<Record, ConvertError> {
    let epoch = r
        .epoch
        .as_ref()
        .map(timestamp_from_pb)
        .ok_or(ConvertError::Missing("Record.epoch"))?;
    let value = r.value.as_ref().map(value_from_pb).transpose()?;
    let expiry = r
        .expiry
        .as_ref()
        .map(|e| {
            let ts =
                e.ts.as_ref()
                    .map(timestamp_from_pb)
                    .ok_or(ConvertError::Missing("Expiry.ts"))?;
            Ok::<_, ConvertError>(Box::new(Expiry::new(ts, e.at_ms)))
        })
        .transpose()?;
    Ok(Record {
        epoch,
        value,
        expiry,
    })
}

/// Encodes a lattice value.
pub fn value_to_pb(v: &Value) -> pb::Value {
    use pb::value::Kind;
    let kind = match v {
        Value::Lww(l) => Kind::Lww(pb::LwwValue {
            ts: Some(timestamp_to_pb(l.ts)),
            value: bytes(&l.value),
        }),
        Value::Set(s) => Kind::Set(pb::SetValue {
            members: s.iter().map(|m| bytes(m)).collect(),
        }),
        Value::OrderedSet(s) => Kind::OrderedSet(pb::SetValue {
            members: s.iter().map(|m| bytes(m)).collect(),
        }),
        Value::OrSet(s) => Kind::OrSet(pb::OrSetValue {
            entries: s
                .iter()
                .map(|m| pb::or_set_value::Entry {
                    member: bytes(m),
                    dots: s
                        .dots(m)
                        .map(|ds| ds.iter().map(dot_to_pb).collect())
                        .unwrap_or_default(),
                })
                .collect(),
            context: Some(context_to_pb(s.context())),
        }),
        Value::Max(m) => Kind::Max(pb::IntValue { value: m.0 }),
        Value::Min(m) => Kind::Min(pb::IntValue { value: m.0 }),
        Value::Bool(b) => Kind::Bool(b.0),
        Value::Counter(c) => Kind::Counter(pb::CounterValue {
            entries: c
                .entries()
                .map(|(actor, (inc, dec))| pb::counter_value::Entry {
                    actor,
                    increments: inc,
                    decrements: dec,
                })
                .collect(),
        }),
        Value::Map(m) => Kind::Map(pb::MapValue {
            entries: m
                .iter()
                .map(|(k, v)| pb::map_value::Entry {
                    key: bytes(k),
                    value: Some(value_to_pb(v)),
                })
                .collect(),
        }),
        Value::Priority(p) => Kind::Priority(pb::PriorityValue {
            priority: p.priority,
            value: bytes(&p.value),
        }),
        Value::SingleKeyCausal(c) => Kind::SingleKeyCausal(pb::SingleKeyCausalValue {
            versions: c
                .versions()
                .iter()
                .map(|(clock, value)| pb::single_key_causal_value::Version {
                    clock: Some(clock_to_pb(clock)),
                    value: bytes(value),
                })
                .collect(),
        }),
        Value::MultiKeyCausal(c) => Kind::MultiKeyCausal(pb::MultiKeyCausalValue {
            versions: c
                .versions()
                .iter()
                .map(|v| pb::multi_key_causal_value::Version {
                    clock: Some(clock_to_pb(&v.clock)),
                    deps: v
                        .deps
                        .iter()
                        .map(|(k, c)| pb::multi_key_causal_value::Dependency {
                            key: bytes(k),
                            clock: Some(clock_to_pb(c)),
                        })
                        .collect(),
                    value: bytes(&v.value),
                })
                .collect(),
        }),
        // ---- lists (helper B) ----
        Value::List(l) => Kind::List(pb::ListValue {
            entries: l
                .iter()
                .map(|(pos, e)| pb::list_value::Entry {
                    pos: pos
                        .iter()
                        .map(|a| pb::list_value::Atom {
                            digit: a.digit,
                            dot: Some(dot_to_pb(&a.dot)),
                        })
                        .collect(),
                    ts: Some(timestamp_to_pb(e.ts)),
                    value: bytes(&e.value),
                })
                .collect(),
            context: Some(context_to_pb(l.context())),
        }),
        // Redis hashes and sorted sets.
        Value::Hash(h) => Kind::Hash(pb::HashValue {
            entries: h
                .entries()
                .map(|(f, r)| pb::hash_value::Entry {
                    field: bytes(f),
                    ts: Some(timestamp_to_pb(r.ts)),
                    value: r.value.as_deref().map(bytes),
                })
                .collect(),
        }),
        Value::SortedSet(z) => Kind::SortedSet(pb::SortedSetValue {
            entries: z
                .entries()
                .map(|(m, r)| pb::sorted_set_value::Entry {
                    member: bytes(m),
                    ts: Some(timestamp_to_pb(r.ts)),
                    score: r.value.map(|s| s.0),
                })
                .collect(),
        }),
    };
    pb::Value { kind: Some(kind) }
}

fn context_to_pb(c: &CausalContext) -> pb::CausalContext {
    pb::CausalContext {
        vector: c.vector().iter().map(|(&a, &n)| (a, n)).collect(),
        cloud: c.cloud().iter().map(dot_to_pb).collect(),
    }
}

fn context_from_pb(c: &pb::CausalContext) -> CausalContext {
    CausalContext::from_parts(
        c.vector.iter().map(|(&a, &n)| (a, n)).collect(),
        c.cloud.iter().map(dot_from_pb).collect(),
    )
}

/// Decodes a lattice value.
pub fn value_from_pb(v: &pb::Value) -> Result<Value, ConvertError> {
    value_from_pb_at(v, 0)
}

fn value_from_pb_at(v: &pb::Value, depth: usize) -> Result<Value, ConvertError> {
    use pb::value::Kind;
    if depth > MAX_DEPTH {
        return Err(ConvertError::TooDeep);
    }
    let kind = v.kind.as_ref().ok_or(ConvertError::Missing("Value.kind"))?;
    Ok(match kind {
        Kind::Lww(l) => {
            let ts = l.ts.as_ref().ok_or(ConvertError::Missing("LwwValue.ts"))?;
            Value::Lww(Lww::new(timestamp_from_pb(ts), blob(&l.value)))
        }
        Kind::Set(s) => Value::Set(s.members.iter().map(blob).collect::<Set<Blob>>()),
        Kind::OrderedSet(s) => {
            Value::OrderedSet(s.members.iter().map(blob).collect::<OrderedSet<Blob>>())
        }
        Kind::OrSet(s) => {
            let context = s.context.as_ref().map(context_from_pb).unwrap_or_default();
            let mut entries: BTreeMap<Blob, BTreeSet<Dot>> = BTreeMap::new();
            for e in &s.entries {
                entries
                    .entry(blob(&e.member))
                    .or_default()
                    .extend(e.dots.iter().map(dot_from_pb));
            }
            Value::OrSet(Box::new(OrSet::from_parts(entries, context)))
        }
        Kind::Max(m) => Value::Max(Max(m.value)),
        Kind::Min(m) => Value::Min(Min(m.value)),
        Kind::Bool(b) => Value::Bool(Bool(*b)),
        Kind::Counter(c) => Value::Counter(Counter::from_entries(
            c.entries
                .iter()
                .map(|e| (e.actor, (e.increments, e.decrements))),
        )),
        Kind::Map(m) => {
            let mut map: Map<Blob, Value> = Map::new();
            for e in &m.entries {
                let value = e
                    .value
                    .as_ref()
                    .ok_or(ConvertError::Missing("MapValue.Entry.value"))?;
                map.insert_merge(blob(&e.key), value_from_pb_at(value, depth + 1)?);
            }
            Value::Map(map)
        }
        Kind::Priority(p) => Value::Priority(Priority {
            priority: p.priority,
            value: blob(&p.value),
        }),
        Kind::SingleKeyCausal(c) => {
            let mut versions = Vec::with_capacity(c.versions.len());
            for v in &c.versions {
                let clock = v
                    .clock
                    .as_ref()
                    .ok_or(ConvertError::Missing("SingleKeyCausalValue.Version.clock"))?;
                versions.push((clock_from_pb(clock), blob(&v.value)));
            }
            Value::SingleKeyCausal(SingleKeyCausal::from_versions(versions))
        }
        Kind::MultiKeyCausal(c) => {
            let mut versions = Vec::with_capacity(c.versions.len());
            for v in &c.versions {
                let clock = v
                    .clock
                    .as_ref()
                    .ok_or(ConvertError::Missing("MultiKeyCausalValue.Version.clock"))?;
                let mut deps = BTreeMap::new();
                for d in &v.deps {
                    let dc = d.clock.as_ref().ok_or(ConvertError::Missing(
                        "MultiKeyCausalValue.Dependency.clock",
                    ))?;
                    deps.entry(blob(&d.key))
                        .or_insert_with(VectorClock::new)
                        .merge_from(&clock_from_pb(dc));
                }
                versions.push(CausalVersion {
                    clock: clock_from_pb(clock),
                    deps,
                    value: blob(&v.value),
                });
            }
            Value::MultiKeyCausal(MultiKeyCausal::from_versions(versions))
        }
        // ---- lists (helper B) ----
        Kind::List(l) => Value::List(Box::new(list_from_pb(l)?)),
        // Redis hashes and sorted sets.
        Kind::Hash(h) => {
            let mut entries = Vec::with_capacity(h.entries.len());
            for e in &h.entries {
                let ts =
                    e.ts.as_ref()
                        .ok_or(ConvertError::Missing("HashValue.Entry.ts"))?;
                let value = e.value.as_ref().map(blob);
                entries.push((blob(&e.field), FieldReg::new(timestamp_from_pb(ts), value)));
            }
            Value::Hash(Box::new(Hash::from_entries(entries)))
        }
        Kind::SortedSet(z) => {
            let mut entries = Vec::with_capacity(z.entries.len());
            for e in &z.entries {
                let ts =
                    e.ts.as_ref()
                        .ok_or(ConvertError::Missing("SortedSetValue.Entry.ts"))?;
                let score = e.score.map(Score);
                entries.push((blob(&e.member), FieldReg::new(timestamp_from_pb(ts), score)));
            }
            Value::SortedSet(Box::new(SortedSet::from_entries(entries)))
        }
    })
}

// ---- lists (helper B) ----
fn list_from_pb(l: &pb::ListValue) -> Result<lattice::List, ConvertError> {
    use lattice::list::{Atom, Entry};
    let context = l.context.as_ref().map(context_from_pb).unwrap_or_default();
    let mut entries = BTreeMap::new();
    for e in &l.entries {
        if e.pos.len() > lattice::list::MAX_PATH {
            return Err(ConvertError::TooDeep);
        }
        let mut pos = Vec::with_capacity(e.pos.len());
        for a in &e.pos {
            let dot = a
                .dot
                .as_ref()
                .ok_or(ConvertError::Missing("ListValue.Atom.dot"))?;
            pos.push(Atom {
                digit: a.digit,
                dot: dot_from_pb(dot),
            });
        }
        let ts =
            e.ts.as_ref()
                .ok_or(ConvertError::Missing("ListValue.Entry.ts"))?;
        let entry = Entry {
            ts: timestamp_from_pb(ts),
            value: blob(&e.value),
        };
        // Duplicate positions on the wire merge as the lattice would (larger value wins).
        let slot = entries
            .entry(pos.into_boxed_slice())
            .or_insert(entry.clone());
        if entry > *slot {
            *slot = entry;
        }
    }
    Ok(lattice::List::from_parts(entries, context))
}
