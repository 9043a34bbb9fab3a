//! What Redis hashes (`shard::hash`) and sorted sets (`shard::zset`) share: the items their results are made of, argument parsing, `HSCAN`/`ZSCAN` paging
//! and Redis's glob patterns.
//!
//! # Results
//! A hash or sorted-set command answers an [`OpResult::Int`] or an [`OpResult::Multi`] of
//! items, which the RESP front end shapes (`front::resp::coll_reply`):
//! - a byte string is a [`Value::Lww`] ([`bulk`]), a missing one `Value(None)` ([`NIL`]);
//! - a score is a [`Value::Priority`] whose priority is the score and whose value is the
//!   member (empty for a score alone) ([`scored`]): the one value type pairing an `f64`
//!   with bytes, so scores travel between nodes exactly.

use lattice::{Blob, Lww, Priority, Timestamp, Value};

use crate::error::NodeError;
use crate::op::OpResult;

/// Sizes up to which `HSCAN`/`ZSCAN` return everything in one reply with cursor 0, as Redis
/// does for its small (listpack) encodings.
pub(crate) const SCAN_ALL_UP_TO: usize = 128;

/// Largest `COUNT` a scan honours per call (bounded replies).
const MAX_SCAN_COUNT: usize = 10_000;

/// A byte-string item.
pub(crate) fn bulk(b: &[u8]) -> OpResult {
    OpResult::Value(Some(Value::Lww(Lww::new(Timestamp::ZERO, Box::from(b)))))
}

/// A missing item (nil).
pub(crate) const NIL: OpResult = OpResult::Value(None);

/// A score item, with its member (empty for a score alone).
pub(crate) fn scored(member: &[u8], score: f64) -> OpResult {
    OpResult::Value(Some(Value::Priority(Priority::new(
        score,
        Box::from(member),
    ))))
}

/// A Redis error reply of the `ERR` class, carrying its message (without `ERR `).
pub(crate) fn invalid(msg: &str) -> NodeError {
    NodeError::InvalidArgument(msg.to_string())
}

/// Redis's `wrong number of arguments` message for `name`.
pub(crate) fn arity(name: &[u8]) -> String {
    format!(
        "wrong number of arguments for '{}' command",
        String::from_utf8_lossy(name).to_lowercase()
    )
}

/// Redis's syntax error message.
pub(crate) const SYNTAX: &str = "syntax error";
/// Redis's message for an argument that is not an integer.
pub(crate) const NOT_INTEGER: &str = "value is not an integer or out of range";
/// Redis's message for an argument that is not a number.
pub(crate) const NOT_FLOAT: &str = "value is not a valid float";

/// An integer argument as Redis parses them (canonical decimal).
pub(crate) fn int_arg(b: &[u8]) -> Result<i64, String> {
    super::parse_strict_i64(b).ok_or_else(|| NOT_INTEGER.to_string())
}

/// `HSCAN`/`ZSCAN` options after the cursor.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScanArgs<'a> {
    /// Where to resume (0: from the start).
    pub(crate) cursor: u64,
    /// `MATCH` pattern.
    pub(crate) pattern: Option<&'a [u8]>,
    /// `COUNT`: how many entries to examine.
    pub(crate) count: usize,
    /// `NOVALUES` (HSCAN): fields only.
    pub(crate) novalues: bool,
}

/// Parses `cursor [MATCH pattern] [COUNT n] [NOVALUES]` (`NOVALUES` only if `novalues_ok`).
pub(crate) fn parse_scan<'a>(args: &[&'a [u8]], novalues_ok: bool) -> Result<ScanArgs<'a>, String> {
    let Some((cursor, rest)) = args.split_first() else {
        return Err(SYNTAX.into());
    };
    let cursor = std::str::from_utf8(cursor)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| "invalid cursor".to_string())?;
    let mut out = ScanArgs {
        cursor,
        pattern: None,
        count: 10,
        novalues: false,
    };
    let mut i = 0;
    while i < rest.len() {
        let opt = rest[i];
        let more = rest.len() - i - 1;
        if opt.eq_ignore_ascii_case(b"COUNT") && more >= 1 {
            let n = int_arg(rest[i + 1])?;
            if n < 1 {
                return Err(SYNTAX.into());
            }
            out.count = usize::try_from(n).unwrap_or(usize::MAX).min(MAX_SCAN_COUNT);
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"MATCH") && more >= 1 {
            out.pattern = Some(rest[i + 1]).filter(|p| *p != b"*");
            i += 2;
        } else if novalues_ok && opt.eq_ignore_ascii_case(b"NOVALUES") {
            out.novalues = true;
            i += 1;
        } else {
            return Err(SYNTAX.into());
        }
    }
    Ok(out)
}

/// The scan order of an entry: FNV-1a of its bytes (never 0, which ends a scan), the same
/// on every node, so a cursor means the same on any replica.
fn scan_hash(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// One page of a scan over `entries` (live, `len` of them): the next cursor (0 at the end)
/// and the entries of the page that match the pattern.
///
/// Small collections come whole. Larger ones are scanned in the order of [`scan_hash`]; the
/// cursor is the hash to resume from, so an entry present for the whole scan is returned
/// (once, unless its hash collides with the page boundary's), whatever else changes —
/// Redis's guarantee. Each call costs a pass over the collection.
pub(crate) fn scan_page<'e, T>(
    entries: impl Iterator<Item = (&'e Blob, T)>,
    len: usize,
    scan: &ScanArgs<'_>,
) -> (u64, Vec<(&'e Blob, T)>) {
    let keep = |m: &Blob| scan.pattern.is_none_or(|p| crate::glob::matches_key(p, m));
    if len <= SCAN_ALL_UP_TO {
        return (0, entries.filter(|(m, _)| keep(m)).collect());
    }
    let mut page: Vec<(u64, &'e Blob, T)> = entries
        .map(|(m, t)| (scan_hash(m), m, t))
        .filter(|(h, _, _)| *h >= scan.cursor)
        .collect();
    page.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    // A page ends between two hashes, never inside one.
    let mut end = scan.count.min(page.len());
    while end < page.len() && end > 0 && page[end].0 == page[end - 1].0 {
        end += 1;
    }
    let next = page.get(end).map_or(0, |e| e.0);
    page.truncate(end);
    let found = page
        .into_iter()
        .filter(|(_, m, _)| keep(m))
        .map(|(_, m, t)| (m, t))
        .collect();
    (next, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_scans_page_by_hash_and_return_everything_once() {
        let entries: Vec<Blob> = (0..1000)
            .map(|i| Box::from(format!("f{i}").as_bytes()))
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = 0;
        let mut calls = 0;
        loop {
            let scan = ScanArgs {
                cursor,
                pattern: None,
                count: 37,
                novalues: false,
            };
            let (next, page) = scan_page(entries.iter().map(|e| (e, ())), entries.len(), &scan);
            assert!(page.len() <= 40);
            for (m, ()) in page {
                assert!(seen.insert(m.clone()), "returned twice");
            }
            calls += 1;
            if next == 0 {
                break;
            }
            cursor = next;
        }
        assert_eq!(seen.len(), 1000);
        assert!(calls >= 1000 / 37);
    }

    #[test]
    fn scan_arguments() {
        let a: [&[u8]; 5] = [b"0", b"MATCH", b"f*", b"count", b"5"];
        let s = parse_scan(&a, false).unwrap();
        assert_eq!((s.cursor, s.pattern, s.count), (0, Some(&b"f*"[..]), 5));
        assert_eq!(parse_scan(&[b"x"], false).unwrap_err(), "invalid cursor");
        assert_eq!(
            parse_scan(&[b"0", b"COUNT", b"0"], false).unwrap_err(),
            SYNTAX
        );
        assert_eq!(parse_scan(&[b"0", b"NOVALUES"], false).unwrap_err(), SYNTAX);
        assert!(parse_scan(&[b"0", b"NOVALUES"], true).unwrap().novalues);
    }
}

#[cfg(test)]
#[path = "coll_tests.rs"]
mod shard_tests;
