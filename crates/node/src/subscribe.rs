//! Subscriptions: pushing new versions of keys to the connections that asked for them
//! (`Subscribe` / `Unsubscribe` in the native protocol, see docs/subscriptions.md).
//!
//! Each worker keeps one [`Subscriptions`] table: per connection, the keys it subscribed,
//! each with its period, when it is next due, and the version last pushed. A worker task
//! runs a [round](Subscriptions::round) every [`TICK`]: every due key whose value version
//! (the hash `GetDelta` uses) differs from the one last pushed gets a `Notification`, and is
//! then not due again before its period has passed — so a key is pushed at most once per
//! period and the push carries the value current at that moment (latest value wins; writes
//! in between are never queued). Polling the value, rather than hooking every write path,
//! catches changes from client writes, gossip, hand-off and repair alike.
//!
//! Pushes go through a bounded channel per connection, drained by the connection's task
//! between responses. A round never waits: when a connection's channel is full (a slow
//! subscriber), the rest of that connection's due keys wait for the next round, and what
//! they then push is the value current then. Memory is bounded by [`PUSH_QUEUE`] frames and
//! [`MAX_KEYS_PER_CONNECTION`] keys per connection.
//!
//! A key whose replica this worker stops being (a view change) gets one push with `moved`
//! set and leaves the table: the client subscribes again at its new replicas. A connection
//! that closes drops all its subscriptions (its `ConnectionSubscriptions`, in the native
//! front end, ends them when dropped).

use std::time::{Duration, Instant};

use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use tokio::sync::mpsc;
use wire::pb;

use crate::error::NodeError;

/// Most keys one connection may subscribe to.
pub const MAX_KEYS_PER_CONNECTION: usize = 10_000;

/// Period of a `Subscribe` with `period_ms = 0`.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(100);

/// Shortest period (shorter ones are raised to it); also the interval between rounds.
pub const MIN_PERIOD: Duration = Duration::from_millis(10);

/// Longest period (longer ones are lowered to it).
pub const MAX_PERIOD: Duration = Duration::from_secs(60);

/// Interval between two rounds of a worker that has subscriptions.
pub const TICK: Duration = MIN_PERIOD;

/// Pushes waiting to be written, per connection.
pub const PUSH_QUEUE: usize = 1024;

/// The period a `Subscribe` asks for: 0 is the default, others are clamped to
/// [`MIN_PERIOD`, `MAX_PERIOD`].
pub fn period_of(ms: u32) -> Duration {
    if ms == 0 {
        return DEFAULT_PERIOD;
    }
    Duration::from_millis(u64::from(ms)).clamp(MIN_PERIOD, MAX_PERIOD)
}

pub use wire::value_version;

/// What a round finds for one subscribed key.
#[derive(Clone, Debug, PartialEq)]
pub enum Watched {
    /// This worker holds the key; its current value (`None`: absent or deleted).
    Value(Option<pb::Value>),
    /// This worker no longer holds a replica of the key.
    Moved,
    /// Nothing to say this round (a disk-tier read failed).
    Unknown,
    /// The key's value has the fingerprint recorded when its version was last pushed (or
    /// found current): unchanged, not read ([`Subscriptions::round_with`]).
    Unchanged,
}

/// One subscribed key of one connection.
#[derive(Debug)]
struct Sub {
    period: Duration,
    /// When the key is next checked.
    due: Instant,
    /// The version last pushed (`None`: nothing pushed yet).
    pushed: Option<u64>,
    /// The fingerprint of the value `pushed` is the version of, if the round's reader
    /// gave one ([`Subscriptions::round_with`]).
    fingerprint: Option<Fingerprint>,
}

/// What a round's reader keeps of a value it found, to tell next time that it has not
/// changed without reading it ([`Subscriptions::round_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// A hash of the value: equal only for equal values.
    pub hash: u64,
    /// When the reader found it, in its own terms (the worker: its store's change count),
    /// if it could tell (`None`: the value must be read again to know it is the same).
    pub as_of: Option<u64>,
}

/// One connection's subscriptions.
#[derive(Debug)]
struct Conn {
    /// Where its pushes go.
    tx: mpsc::Sender<pb::Response>,
    keys: HashMap<Bytes, Sub>,
    /// The earliest `due` of its keys (a round skips the connection before then).
    next_due: Instant,
}

/// A worker's subscriptions, by connection.
#[derive(Debug, Default)]
pub struct Subscriptions {
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    /// Subscribed keys, summed over connections.
    keys: usize,
}

/// A push for `key`.
fn notification(key: &Bytes, value: Option<pb::Value>, version: u64, moved: bool) -> pb::Response {
    pb::Response {
        id: 0,
        result: Some(pb::response::Result::Notification(pb::Notification {
            key: key.clone(),
            value,
            version,
            moved,
        })),
    }
}

impl Subscriptions {
    /// Subscribed keys, summed over connections (the `subscriptions` status counter).
    pub fn len(&self) -> usize {
        self.keys
    }

    /// True if no connection subscribes to anything.
    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// Registers a connection; returns its id and the receiving end of its pushes.
    pub fn register(&mut self) -> (u64, mpsc::Receiver<pb::Response>) {
        let (tx, rx) = mpsc::channel(PUSH_QUEUE);
        self.next_conn += 1;
        let id = self.next_conn;
        let conn = Conn {
            tx,
            keys: HashMap::new(),
            next_due: Instant::now() + MAX_PERIOD,
        };
        self.conns.insert(id, conn);
        (id, rx)
    }

    /// Subscribes connection `conn` to `keys` with `period`; returns the number of distinct
    /// keys. Keys already subscribed keep their last pushed version (no new first push) and
    /// take the new period. Fails, subscribing nothing, if the connection would exceed
    /// [`MAX_KEYS_PER_CONNECTION`].
    pub fn subscribe(
        &mut self,
        conn: u64,
        keys: &[Bytes],
        period: Duration,
        now: Instant,
    ) -> Result<usize, NodeError> {
        self.subscribe_from(conn, keys, &[], period, now)
    }

    /// [`subscribe`](Subscriptions::subscribe) with, per key of `keys` (in order; missing
    /// entries are 0), the version the subscriber already holds: a new subscription starts
    /// as if that version had been pushed, so a key still at it gets no first push.
    pub fn subscribe_from(
        &mut self,
        conn: u64,
        keys: &[Bytes],
        known: &[u64],
        period: Duration,
        now: Instant,
    ) -> Result<usize, NodeError> {
        let c = self
            .conns
            .get_mut(&conn)
            .ok_or_else(|| NodeError::Unavailable("connection not registered".into()))?;
        let distinct: HashSet<&Bytes> = keys.iter().collect();
        let new = distinct
            .iter()
            .filter(|k| !c.keys.contains_key(**k))
            .count();
        if c.keys.len() + new > MAX_KEYS_PER_CONNECTION {
            return Err(NodeError::InvalidArgument(format!(
                "subscribing {new} more keys would exceed the limit of \
                 {MAX_KEYS_PER_CONNECTION} keys per connection ({} subscribed)",
                c.keys.len()
            )));
        }
        for (i, key) in keys.iter().enumerate() {
            match c.keys.get_mut(key) {
                Some(sub) => {
                    sub.period = period;
                    sub.due = sub.due.min(now + period);
                }
                None => {
                    let sub = Sub {
                        period,
                        due: now,
                        pushed: known.get(i).copied().filter(|v| *v != 0),
                        fingerprint: None,
                    };
                    c.keys.insert(key.clone(), sub);
                }
            }
        }
        c.next_due = now;
        self.keys += new;
        Ok(distinct.len())
    }

    /// Ends connection `conn`'s subscriptions of `keys`; returns how many it had.
    pub fn unsubscribe(&mut self, conn: u64, keys: &[Bytes]) -> usize {
        let Some(c) = self.conns.get_mut(&conn) else {
            return 0;
        };
        let removed = keys.iter().filter(|k| c.keys.remove(*k).is_some()).count();
        self.keys -= removed;
        removed
    }

    /// Drops a closed connection and all its subscriptions.
    pub fn close(&mut self, conn: u64) {
        if let Some(c) = self.conns.remove(&conn) {
            self.keys -= c.keys.len();
        }
        debug_assert_eq!(
            self.keys,
            self.conns.values().map(|c| c.keys.len()).sum::<usize>(),
            "the subscription count matches the table"
        );
    }

    /// One round at time `now`: pushes every due key whose version differs from the one
    /// last pushed to its connection; `watch` reads a key's current state on the worker.
    pub fn round(&mut self, now: Instant, mut watch: impl FnMut(&[u8]) -> Watched) {
        self.round_with(now, |key, _| (watch(key), None));
    }

    /// [`round`](Subscriptions::round) with fingerprints: `watch` gets a key and the
    /// fingerprint of the value last pushed (or found current) for it, and answers what
    /// it finds with the current value's fingerprint (`None`: none), or
    /// [`Watched::Unchanged`] when that is the same value — so an unchanged large value is
    /// neither copied, encoded nor hashed as a whole again every period. With `Unchanged`
    /// the fingerprint answered (of the same value, found later) replaces the one kept.
    pub fn round_with(
        &mut self,
        now: Instant,
        mut watch: impl FnMut(&[u8], Option<Fingerprint>) -> (Watched, Option<Fingerprint>),
    ) {
        let mut ended = 0;
        for c in self.conns.values_mut() {
            if c.next_due > now {
                continue;
            }
            let mut next_due = now + MAX_PERIOD;
            let mut moved: Vec<Bytes> = Vec::new();
            let mut full = false;
            for (key, sub) in c.keys.iter_mut() {
                if full || sub.due > now {
                    next_due = next_due.min(sub.due);
                    continue;
                }
                if c.tx.capacity() == 0 {
                    // A slow subscriber: the rest waits for the next round.
                    full = true;
                    next_due = next_due.min(sub.due);
                    continue;
                }
                let (watched, fingerprint) = watch(key, sub.fingerprint);
                let (push, version) = match watched {
                    Watched::Moved => (Some(notification(key, None, 0, true)), None),
                    Watched::Value(value) => {
                        let version = value.as_ref().map_or(0, value_version);
                        if sub.pushed == Some(version) {
                            sub.fingerprint = fingerprint;
                            (None, None)
                        } else {
                            (
                                Some(notification(key, value, version, false)),
                                Some(version),
                            )
                        }
                    }
                    Watched::Unchanged => {
                        if fingerprint.is_some() {
                            sub.fingerprint = fingerprint;
                        }
                        (None, None)
                    }
                    Watched::Unknown => (None, None),
                };
                if let Some(push) = push {
                    let is_moved = version.is_none();
                    if c.tx.try_send(push).is_err() {
                        full = true;
                        next_due = next_due.min(sub.due);
                        continue;
                    }
                    if is_moved {
                        moved.push(key.clone());
                        continue;
                    }
                    sub.pushed = version;
                    sub.fingerprint = fingerprint;
                }
                sub.due = now + sub.period;
                next_due = next_due.min(sub.due);
            }
            for key in &moved {
                c.keys.remove(key);
            }
            ended += moved.len();
            // A full channel: try again at the next round.
            c.next_due = next_due;
        }
        self.keys -= ended;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table with one connection subscribed to `a` every 100 ms at `t0`: the table, the
    /// connection's pushes, `t0` and the period.
    fn subscribed_to_a() -> (
        Subscriptions,
        mpsc::Receiver<pb::Response>,
        Instant,
        Duration,
    ) {
        let mut subs = Subscriptions::default();
        let (conn, rx) = subs.register();
        let t0 = Instant::now();
        let period = Duration::from_millis(100);
        subs.subscribe(conn, &[key("a")], period, t0).unwrap();
        (subs, rx, t0, period)
    }

    fn fp(hash: u64) -> Fingerprint {
        Fingerprint { hash, as_of: None }
    }

    fn lww(v: &[u8]) -> pb::Value {
        pb::Value {
            kind: Some(pb::value::Kind::Lww(pb::LwwValue {
                ts: None,
                value: Bytes::copy_from_slice(v),
            })),
        }
    }

    fn key(k: &str) -> Bytes {
        Bytes::copy_from_slice(k.as_bytes())
    }

    /// The pushes waiting: (key, value bytes or None, moved).
    fn drain(rx: &mut mpsc::Receiver<pb::Response>) -> Vec<(String, Option<Vec<u8>>, bool)> {
        let mut out = Vec::new();
        while let Ok(r) = rx.try_recv() {
            assert_eq!(r.id, 0, "pushes have id 0");
            let Some(pb::response::Result::Notification(n)) = r.result else {
                panic!("not a notification: {r:?}")
            };
            let value = n.value.map(|v| match v.kind {
                Some(pb::value::Kind::Lww(l)) => l.value.to_vec(),
                other => panic!("{other:?}"),
            });
            out.push((String::from_utf8(n.key.to_vec()).unwrap(), value, n.moved));
        }
        out.sort();
        out
    }

    #[test]
    fn first_push_then_only_changes_at_most_once_per_period() {
        let mut subs = Subscriptions::default();
        let (conn, mut rx) = subs.register();
        let t0 = Instant::now();
        let period = Duration::from_millis(100);
        let n = subs
            .subscribe(conn, &[key("a"), key("b"), key("a")], period, t0)
            .unwrap();
        assert_eq!(n, 2, "distinct keys");
        assert_eq!(subs.len(), 2);
        let mut a = b"1".to_vec();
        let read = |a: &[u8]| {
            let a = a.to_vec();
            move |k: &[u8]| match k {
                b"a" => Watched::Value(Some(lww(&a))),
                _ => Watched::Value(None),
            }
        };
        subs.round(t0, read(&a));
        assert_eq!(
            drain(&mut rx),
            vec![
                ("a".into(), Some(b"1".to_vec()), false),
                ("b".into(), None, false)
            ],
            "the current values right away, absent included"
        );
        subs.round(t0 + period, read(&a));
        assert!(drain(&mut rx).is_empty(), "nothing changed");
        a = b"2".to_vec();
        subs.round(t0 + period + Duration::from_millis(10), read(&a));
        assert!(drain(&mut rx).is_empty(), "not due before its period");
        a = b"3".to_vec();
        subs.round(t0 + 2 * period, read(&a));
        assert_eq!(
            drain(&mut rx),
            vec![("a".into(), Some(b"3".to_vec()), false)],
            "the latest value, once"
        );
    }

    #[test]
    fn a_key_subscribed_at_the_version_held_gets_no_first_push() {
        let mut subs = Subscriptions::default();
        let (conn, mut rx) = subs.register();
        let t0 = Instant::now();
        let period = Duration::from_millis(100);
        let held = value_version(&lww(b"1"));
        // `a` at the version its value has, `b` at an older one, `c` with no entry.
        subs.subscribe_from(
            conn,
            &[key("a"), key("b"), key("c")],
            &[held, held],
            period,
            t0,
        )
        .unwrap();
        let read = |a: &'static [u8], b: &'static [u8]| {
            move |k: &[u8]| match k {
                b"a" => Watched::Value(Some(lww(a))),
                b"b" => Watched::Value(Some(lww(b))),
                _ => Watched::Value(None),
            }
        };
        subs.round(t0, read(b"1", b"2"));
        assert_eq!(
            drain(&mut rx),
            vec![
                ("b".into(), Some(b"2".to_vec()), false),
                ("c".into(), None, false)
            ],
            "a value the subscriber holds is not sent again"
        );
        subs.round(t0 + period, read(b"3", b"2"));
        assert_eq!(
            drain(&mut rx),
            vec![("a".into(), Some(b"3".to_vec()), false)],
            "its next version is"
        );
    }

    #[test]
    fn an_unchanged_fingerprint_skips_the_value_and_a_new_one_is_pushed() {
        let (mut subs, mut rx, t0, period) = subscribed_to_a();
        let mut seen_by_reader = Vec::new();
        subs.round_with(t0, |_, seen| {
            seen_by_reader.push(seen);
            (Watched::Value(Some(lww(b"1"))), Some(fp(11)))
        });
        assert_eq!(
            drain(&mut rx),
            vec![("a".into(), Some(b"1".to_vec()), false)]
        );
        subs.round_with(t0 + period, |_, seen| {
            seen_by_reader.push(seen);
            (Watched::Unchanged, seen)
        });
        assert!(drain(&mut rx).is_empty(), "unchanged");
        subs.round_with(t0 + 2 * period, |_, seen| {
            seen_by_reader.push(seen);
            (Watched::Value(Some(lww(b"2"))), Some(fp(22)))
        });
        assert_eq!(
            drain(&mut rx),
            vec![("a".into(), Some(b"2".to_vec()), false)]
        );
        subs.round_with(t0 + 3 * period, |_, seen| {
            seen_by_reader.push(seen);
            (Watched::Unchanged, seen)
        });
        assert_eq!(
            seen_by_reader,
            vec![None, Some(fp(11)), Some(fp(11)), Some(fp(22))]
        );
    }

    #[test]
    fn an_unchanged_value_keeps_the_fingerprint_found_last() {
        let (mut subs, mut rx, t0, period) = subscribed_to_a();
        let at = |mark| {
            Some(Fingerprint {
                hash: 5,
                as_of: Some(mark),
            })
        };
        subs.round_with(t0, |_, _| (Watched::Value(Some(lww(b"1"))), at(1)));
        assert_eq!(drain(&mut rx).len(), 1);
        subs.round_with(t0 + period, |_, seen| {
            assert_eq!(seen, at(1));
            (Watched::Unchanged, at(9))
        });
        let mut seen_last = None;
        subs.round_with(t0 + 2 * period, |_, seen| {
            seen_last = seen;
            (Watched::Unchanged, seen)
        });
        assert_eq!(seen_last, at(9), "the same value, found later");
        assert!(drain(&mut rx).is_empty());
    }

    #[test]
    fn a_fingerprint_is_kept_only_with_the_push_it_belongs_to() {
        let mut subs = Subscriptions::default();
        let (conn, mut rx) = subs.register();
        let keys: Vec<Bytes> = (0..PUSH_QUEUE + 1).map(|i| key(&format!("k{i}"))).collect();
        let t0 = Instant::now();
        subs.subscribe(conn, &keys, DEFAULT_PERIOD, t0).unwrap();
        // One key finds the channel full: its fingerprint must not be recorded, else the
        // next round would call it unchanged and never push it.
        subs.round_with(t0, |_, _| (Watched::Value(Some(lww(b"v"))), Some(fp(7))));
        assert_eq!(rx.len(), PUSH_QUEUE);
        drain(&mut rx);
        let mut unseen = 0;
        subs.round_with(t0 + TICK, |_, seen| {
            if seen.is_none() {
                unseen += 1;
                (Watched::Value(Some(lww(b"v"))), Some(fp(7)))
            } else {
                (Watched::Unchanged, seen)
            }
        });
        assert_eq!(unseen, 1, "the key skipped is read again");
        assert_eq!(drain(&mut rx).len(), 1, "and pushed");
    }

    #[test]
    fn a_full_channel_skips_and_the_next_round_sends_the_current_value() {
        let mut subs = Subscriptions::default();
        let (conn, mut rx) = subs.register();
        let keys: Vec<Bytes> = (0..PUSH_QUEUE + 10)
            .map(|i| key(&format!("k{i}")))
            .collect();
        let t0 = Instant::now();
        subs.subscribe(conn, &keys, DEFAULT_PERIOD, t0).unwrap();
        subs.round(t0, |_| Watched::Value(Some(lww(b"old"))));
        assert_eq!(rx.len(), PUSH_QUEUE, "bounded");
        // The subscriber reads nothing: the rest waits, then gets the value current then.
        subs.round(t0 + TICK, |_| Watched::Value(Some(lww(b"new"))));
        assert_eq!(rx.len(), PUSH_QUEUE);
        let first = drain(&mut rx);
        assert!(first
            .iter()
            .all(|(_, v, _)| v.as_deref() == Some(&b"old"[..])));
        subs.round(t0 + 2 * TICK, |_| Watched::Value(Some(lww(b"new"))));
        let rest = drain(&mut rx);
        assert_eq!(rest.len(), 10, "the keys skipped before");
        assert!(rest
            .iter()
            .all(|(_, v, _)| v.as_deref() == Some(&b"new"[..])));
    }

    #[test]
    fn moved_keys_leave_and_closing_frees_everything() {
        let mut subs = Subscriptions::default();
        let (c1, mut rx1) = subs.register();
        let (c2, _rx2) = subs.register();
        let t0 = Instant::now();
        subs.subscribe(c1, &[key("a"), key("b")], DEFAULT_PERIOD, t0)
            .unwrap();
        subs.subscribe(c2, &[key("a")], DEFAULT_PERIOD, t0).unwrap();
        assert_eq!(subs.len(), 3);
        subs.round(t0, |k| match k {
            b"a" => Watched::Moved,
            _ => Watched::Value(None),
        });
        assert_eq!(
            drain(&mut rx1),
            vec![("a".into(), None, true), ("b".into(), None, false)]
        );
        assert_eq!(subs.len(), 1, "moved keys are no longer subscribed");
        assert_eq!(subs.unsubscribe(c1, &[key("b"), key("zz")]), 1);
        assert_eq!(subs.len(), 0);
        subs.subscribe(c2, &[key("x"), key("y")], DEFAULT_PERIOD, t0)
            .unwrap();
        subs.close(c2);
        assert_eq!(subs.len(), 0, "closing frees the connection's keys");
        assert!(subs.conns.len() == 1);
    }

    #[test]
    fn limits_and_periods() {
        let mut subs = Subscriptions::default();
        let (conn, _rx) = subs.register();
        let t0 = Instant::now();
        let keys: Vec<Bytes> = (0..MAX_KEYS_PER_CONNECTION)
            .map(|i| key(&format!("k{i}")))
            .collect();
        subs.subscribe(conn, &keys, DEFAULT_PERIOD, t0).unwrap();
        let e = subs
            .subscribe(conn, &[key("one more")], DEFAULT_PERIOD, t0)
            .unwrap_err();
        assert!(matches!(e, NodeError::InvalidArgument(_)), "{e:?}");
        assert_eq!(subs.len(), MAX_KEYS_PER_CONNECTION, "nothing subscribed");
        // Subscribing a key again is not a new one.
        assert_eq!(subs.subscribe(conn, &keys[..5], MIN_PERIOD, t0).unwrap(), 5);
        assert_eq!(period_of(0), DEFAULT_PERIOD);
        assert_eq!(period_of(1), MIN_PERIOD);
        assert_eq!(period_of(250), Duration::from_millis(250));
        assert_eq!(period_of(u32::MAX), MAX_PERIOD);
    }
}
