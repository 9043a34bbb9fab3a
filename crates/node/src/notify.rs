//! Redis keyspace notifications (`notify-keyspace-events`): the flag letters, and the
//! events a shard records while they are on.
//!
//! A node holds one set of flags ([`Flags`]), changed by `CONFIG SET` on any of its
//! connections and read by every worker's shard before each client op — one atomic load
//! and one branch while they are off (Redis's default, `""`). While they are on, a shard
//! records a [`KeyEvent`] for every change a client op made (Redis's event names, see
//! `shard::notify`), and its worker publishes them on `__keyspace@0__:<key>` and
//! `__keyevent@0__:<event>` through the pub/sub fan-out (`crate::pubsub::events`) before
//! the op's reply leaves. Behaviour under multi-master replication: docs/protocol.md.

use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;

/// `K`: publish on `__keyspace@0__:<key>`.
pub(crate) const KEYSPACE: u32 = 1 << 0;
/// `E`: publish on `__keyevent@0__:<event>`.
pub(crate) const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME, …).
pub(crate) const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub(crate) const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub(crate) const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub(crate) const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub(crate) const HASH: u32 = 1 << 6;
/// `z`: sorted-set commands.
pub(crate) const ZSET: u32 = 1 << 7;
/// `x`: keys reclaimed at their deadline.
pub(crate) const EXPIRED: u32 = 1 << 8;
/// `e`: keys evicted for memory (latticekv never loses a key to eviction: none is sent).
pub(crate) const EVICTED: u32 = 1 << 9;
/// `t`: stream commands (latticekv has no streams: none is sent).
pub(crate) const STREAM: u32 = 1 << 10;
/// `m`: reads of missing keys (not part of `A`).
pub(crate) const KEY_MISS: u32 = 1 << 11;
/// `d`: module events (latticekv has no modules: none is sent).
pub(crate) const MODULE: u32 = 1 << 12;
/// `n`: keys created (not part of `A`).
pub(crate) const NEW: u32 = 1 << 13;
/// `A`: `g$lshzxetd`.
pub(crate) const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The error for a flag string with a letter Redis does not know (Redis's own words).
pub(crate) const INVALID: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// Parses a `notify-keyspace-events` value as Redis does: `None` if a letter is unknown.
pub(crate) fn parse(s: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for c in s {
        flags |= match c {
            b'A' => ALL,
            b'g' => GENERIC,
            b'$' => STRING,
            b'l' => LIST,
            b's' => SET,
            b'h' => HASH,
            b'z' => ZSET,
            b'x' => EXPIRED,
            b'e' => EVICTED,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b't' => STREAM,
            b'm' => KEY_MISS,
            b'd' => MODULE,
            b'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// Formats flags as Redis's `CONFIG GET` shows them (`A` for all classes, then `K`, `E`,
/// `m`; `n` is shown only without `A`, as Redis 7.0 does).
pub(crate) fn format(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        let letters = [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ];
        s.extend(
            letters
                .iter()
                .filter(|(f, _)| flags & f != 0)
                .map(|(_, c)| c),
        );
    }
    for (f, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & f != 0 {
            s.push(c);
        }
    }
    s
}

/// A node's `notify-keyspace-events`, shared by its connections and shards.
#[derive(Debug, Default)]
pub struct Flags(AtomicU32);

impl Flags {
    /// The flags as set.
    pub(crate) fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the flags.
    pub(crate) fn set(&self, flags: u32) {
        self.0.store(flags, Ordering::Relaxed);
    }

    /// The event classes that produce messages: none unless `K` or `E` is set too (as in
    /// Redis, where `CONFIG SET notify-keyspace-events g` sends nothing).
    pub(crate) fn active(&self) -> u32 {
        let f = self.get();
        if f & (KEYSPACE | KEYEVENT) == 0 {
            0
        } else {
            f
        }
    }
}

/// One event about one key, recorded where the change happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEvent {
    /// Redis's event name (`set`, `del`, `expired`, …).
    pub event: &'static str,
    /// The key.
    pub key: Bytes,
}

/// The two messages an event makes under `flags`: (channel, message) pairs, keyspace
/// first as in Redis.
pub(crate) fn messages(flags: u32, e: &KeyEvent) -> Vec<(Bytes, Bytes)> {
    let mut out = Vec::with_capacity(2);
    if flags & KEYSPACE != 0 {
        let mut ch = Vec::with_capacity(15 + e.key.len());
        ch.extend_from_slice(b"__keyspace@0__:");
        ch.extend_from_slice(&e.key);
        out.push((Bytes::from(ch), Bytes::from_static(e.event.as_bytes())));
    }
    if flags & KEYEVENT != 0 {
        let ch = format!("__keyevent@0__:{}", e.event);
        out.push((Bytes::from(ch), e.key.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_and_print_as_redis_does() {
        // Pairs checked against redis-server 7.0's CONFIG SET / CONFIG GET.
        for (set, shown) in [
            ("A", "A"),
            ("KEA", "AKE"),
            ("Kgn", "gnK"),
            ("gn$", "g$n"),
            ("AKEmn", "AKEm"),
            ("Elx", "lxE"),
            ("", ""),
            ("KA", "AK"),
            ("Ag$lshzxeKEtmdn", "AKEm"),
        ] {
            assert_eq!(format(parse(set.as_bytes()).unwrap()), shown, "{set}");
        }
        assert_eq!(parse(b"xyz"), None);
    }

    #[test]
    fn nothing_is_active_without_k_or_e() {
        let f = Flags::default();
        f.set(parse(b"A").unwrap());
        assert_eq!(f.active(), 0);
        f.set(parse(b"Kg").unwrap());
        assert_ne!(f.active(), 0);
    }
}
