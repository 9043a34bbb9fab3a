//! The row codec and the merge step: a [`Record`] ⇄ the `(value, state, ts)` columns of
//! its row, and "merge an incoming record into the stored one, tell whether it changed".
//!
//! Pure functions, no I/O: the property tests of the idempotence and order-independence
//! argument run here, the real-PostgreSQL tests only confirm the SQL around them.
//!
//! # Columns
//! - `state`: the full record, `record_to_pb(record).encode_to_vec()` (the same bytes the
//!   disk tier stores). Authoritative whenever it is not NULL.
//! - `value`: the plain bytes of an [`Lww`] value, so SQL users can read strings; NULL for a
//!   tombstone and for every other lattice type.
//! - `ts`: [`sql_ts`] of the LWW timestamp for an LWW value, of the record's epoch
//!   otherwise (a tombstone, another type).
//!
//! A row whose `state` is NULL was written by another application with plain SQL. It reads
//! as an LWW write of `value` at `Timestamp { time: ts, writer: 0 }` ([`record_ts`]), with
//! that timestamp as the record's epoch (the epoch convention of [`Record`] for LWW
//! writes); with `value` NULL too it is no record at all (the same as no row).

use lattice::{Lattice, Lww, Record, Timestamp, Value};
use prost::Message;
use wire::convert::{record_from_pb, record_to_pb};
use wire::pb;

use crate::BackingError;

/// The `ts` column for a timestamp: the bits of [`Timestamp::time`] (the hybrid logical
/// time, physical milliseconds `<< 16` plus a 16-bit logical counter) as an `i64`,
/// saturating at `i64::MAX`. Every time an HLC issues before the year ~6400 is below
/// 2^63, so in practice this is a plain reinterpretation and `ORDER BY ts` is timestamp
/// order; the `writer` tie-break is not in the column.
pub(crate) fn sql_ts(ts: Timestamp) -> i64 {
    i64::try_from(ts.time).unwrap_or(i64::MAX)
}

/// The timestamp a SQL-written row (`state IS NULL`) stands for: `time = ts` (a negative
/// `ts` counts as 0), `writer = 0`. So `ts = 0` (the column default) is the oldest
/// timestamp, which any write through latticekv replaces; a SQL user who wants a row to
/// win against writes older than some instant writes `ts = (epoch_ms << 16)`.
pub(crate) fn record_ts(ts: i64) -> Timestamp {
    Timestamp::new(u64::try_from(ts).unwrap_or(0), 0)
}

/// The columns of a row, as read from or written to the table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Columns {
    /// `value`: the LWW bytes, or NULL.
    pub value: Option<Vec<u8>>,
    /// `state`: the encoded record, or NULL (a SQL-written row, or a placeholder).
    pub state: Option<Vec<u8>>,
    /// `ts`: see [`sql_ts`].
    pub ts: i64,
}

/// The columns that store `record`.
pub(crate) fn encode(record: &Record) -> Columns {
    let (value, ts) = match &record.value {
        Some(Value::Lww(lww)) => (Some(lww.value.to_vec()), lww.ts),
        _ => (None, record.epoch),
    };
    Columns {
        value,
        state: Some(record_to_pb(record).encode_to_vec()),
        ts: sql_ts(ts),
    }
}

/// The record a row of `key` holds (`None`: none, as if there were no row).
///
/// # Errors
/// [`BackingError::Corrupt`] if `state` does not decode. The bytes come from the network
/// and may have been written by anyone: nothing here panics on them.
pub(crate) fn decode(key: &[u8], columns: &Columns) -> Result<Option<Record>, BackingError> {
    if let Some(state) = &columns.state {
        let pb = pb::Record::decode(&state[..])
            .map_err(|e| BackingError::corrupt(key, format!("state: {e}")))?;
        let record =
            record_from_pb(&pb).map_err(|e| BackingError::corrupt(key, format!("state: {e}")))?;
        return Ok(Some(record));
    }
    Ok(columns.value.as_ref().map(|bytes| {
        let ts = record_ts(columns.ts);
        Record::new(ts, Some(Value::Lww(Lww::new(ts, bytes.as_slice().into()))))
    }))
}

/// Merges `incoming` into `stored`; returns the new record if the row must change, `None`
/// if `stored` already covers `incoming` (nothing to write).
///
/// This is where applying twice, or in another order, is shown harmless: the result is the
/// lattice join, and a join that changes nothing writes nothing.
pub(crate) fn merge(stored: Option<Record>, incoming: Record) -> Option<Record> {
    match stored {
        None => Some(incoming),
        Some(mut record) => record.merge(incoming).then_some(record),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::{Counter, Map, Max, Set};
    use proptest::prelude::*;

    fn ts(time: u64, writer: u64) -> Timestamp {
        Timestamp::new(time, writer)
    }

    /// Records over a few epochs and a few types, so that merges collide often: equal
    /// epochs merge values, different types meet, tombstones interleave.
    fn record() -> impl Strategy<Value = Record> {
        let blob = || prop::collection::vec(0u8..3, 0..3).prop_map(Box::<[u8]>::from);
        let value = prop_oneof![
            (0u64..4, 0u64..3, blob()).prop_map(|(t, w, v)| Value::Lww(Lww::new(ts(t, w), v))),
            prop::collection::btree_set(blob(), 0..3)
                .prop_map(|s| Value::Set(s.into_iter().collect::<Set<_>>())),
            (0u64..3, 0u64..5, 0u64..5).prop_map(|(actor, p, n)| {
                Value::Counter(Counter::from_entries([(actor, (p, n))]))
            }),
            (-2i64..3).prop_map(|m| Value::Max(Max(m))),
            (blob(), -2i64..3).prop_map(|(k, m)| {
                let mut map = Map::new();
                map.insert_merge(k, Value::Max(Max(m)));
                Value::Map(map)
            }),
        ];
        (0u64..3, 0u64..2, prop::option::weighted(0.8, value))
            .prop_map(|(t, w, value)| Record::new(ts(t, w), value))
    }

    fn apply_all(records: &[Record]) -> Option<Record> {
        // What the table holds after applying `records` one call at a time: encode every
        // intermediate row and decode it back, as the store does between calls.
        let mut row: Option<Columns> = None;
        for r in records {
            let stored = row.as_ref().and_then(|c| decode(b"k", c).unwrap());
            if let Some(new) = merge(stored, r.clone()) {
                row = Some(encode(&new));
            }
        }
        row.and_then(|c| decode(b"k", &c).unwrap())
    }

    proptest! {
        #[test]
        fn rows_round_trip(r in record()) {
            prop_assert_eq!(decode(b"k", &encode(&r)).unwrap(), Some(r));
        }

        #[test]
        fn applying_twice_changes_nothing(rs in prop::collection::vec(record(), 1..5)) {
            let once = apply_all(&rs);
            let stored = once.clone();
            for r in &rs {
                prop_assert_eq!(merge(stored.clone(), r.clone()), None, "re-applying {:?}", r);
            }
            let twice: Vec<Record> = rs.iter().chain(rs.iter()).cloned().collect();
            prop_assert_eq!(apply_all(&twice), once);
        }

        #[test]
        fn order_does_not_matter(rs in prop::collection::vec(record(), 1..5), seed: u64) {
            let mut shuffled = rs.clone();
            // A deterministic permutation from the seed (Fisher-Yates with an LCG).
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (x >> 33) as usize % (i + 1));
            }
            prop_assert_eq!(apply_all(&rs), apply_all(&shuffled));
        }

        #[test]
        fn state_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let columns = Columns { value: None, state: Some(bytes), ts: 0 };
            let _ = decode(b"k", &columns);
        }
    }

    #[test]
    fn sql_rows_read_as_lww() {
        let row = Columns {
            value: Some(b"hi".to_vec()),
            state: None,
            ts: 7 << 16,
        };
        let t = ts(7 << 16, 0);
        let expected = Record::new(t, Some(Value::Lww(Lww::new(t, Box::from(&b"hi"[..])))));
        assert_eq!(decode(b"k", &row).unwrap(), Some(expected.clone()));
        // ts 0 (the default) and negative ts are the oldest timestamp.
        for old in [0, -5, i64::MIN] {
            let r = decode(
                b"k",
                &Columns {
                    ts: old,
                    ..row.clone()
                },
            )
            .unwrap()
            .unwrap();
            assert_eq!(r.epoch, Timestamp::ZERO);
        }
        // No value and no state: no record.
        assert_eq!(decode(b"k", &Columns::default()).unwrap(), None);
        // A newer write replaces the SQL row, an older one does not.
        let newer = Record::new(
            ts(8 << 16, 1),
            Some(Value::Lww(Lww::new(ts(8 << 16, 1), Box::from(&b"new"[..])))),
        );
        let older = Record::new(
            ts(6 << 16, 1),
            Some(Value::Lww(Lww::new(ts(6 << 16, 1), Box::from(&b"old"[..])))),
        );
        assert_eq!(merge(Some(expected.clone()), older), None);
        assert_eq!(merge(Some(expected), newer.clone()), Some(newer));
    }

    #[test]
    fn columns_of_each_kind() {
        let t = ts(5 << 16, 2);
        let lww = Record::new(t, Some(Value::Lww(Lww::new(t, Box::from(&b"v"[..])))));
        let c = encode(&lww);
        assert_eq!(c.value.as_deref(), Some(&b"v"[..]));
        assert_eq!(c.ts, 5 << 16);
        let tomb = encode(&Record::tombstone(ts(9, 1)));
        assert_eq!((tomb.value, tomb.ts), (None, 9));
        let max = encode(&Record::new(ts(3, 1), Some(Value::Max(Max(4)))));
        assert_eq!((max.value, max.ts), (None, 3));
        assert!(max.state.is_some());
    }

    #[test]
    fn ts_mapping_saturates_and_clamps() {
        assert_eq!(sql_ts(ts(0, 9)), 0);
        assert_eq!(sql_ts(ts(i64::MAX as u64, 0)), i64::MAX);
        assert_eq!(sql_ts(ts(u64::MAX, 0)), i64::MAX);
        assert_eq!(record_ts(42), ts(42, 0));
        assert_eq!(record_ts(-1), Timestamp::ZERO);
        // Order-preserving: a later timestamp never maps to a smaller ts.
        let times = [
            0,
            1,
            1 << 40,
            i64::MAX as u64,
            i64::MAX as u64 + 1,
            u64::MAX,
        ];
        for w in times.windows(2) {
            assert!(sql_ts(ts(w[0], 0)) <= sql_ts(ts(w[1], 0)));
        }
    }

    #[test]
    fn garbage_state_is_corrupt() {
        let columns = Columns {
            value: Some(b"plain".to_vec()),
            state: Some(vec![0xff, 0xff, 0xff]),
            ts: 1,
        };
        assert!(matches!(
            decode(b"key", &columns),
            Err(BackingError::Corrupt { key, .. }) if key == "key"
        ));
        // Valid protobuf, but not a record (no epoch).
        let columns = Columns {
            state: Some(Vec::new()),
            ..Columns::default()
        };
        assert!(matches!(
            decode(b"key", &columns),
            Err(BackingError::Corrupt { .. })
        ));
    }
}
