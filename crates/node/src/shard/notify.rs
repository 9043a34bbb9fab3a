//! Keyspace notifications: which events a client op produced, named as Redis names them
//! (see [`crate::notify`] for the flags and the channels).
//!
//! An op is described before it runs (what it is, and the little of the key's state its
//! events depend on: was the key live, did it have a deadline), then its result decides
//! the events: a command that changed nothing sends none, as in Redis. A collection
//! emptied by a removal also sends `del`. Only ops run for clients get here
//! ([`Shard::execute`]); records merged from other replicas (gossip, hand-off, repair) send
//! nothing. A key reclaimed at its deadline sends `expired` from its primary replica alone.

use std::sync::Arc;

use bytes::Bytes;

use super::Shard;
use crate::list_op::ListOp;
use crate::notify::{self, Flags, KeyEvent};
use crate::op::{Deadline, Op, OpResult};

/// What an op is, as far as its events go.
enum What {
    /// Sends nothing.
    Nothing,
    /// A write that records its own events as it runs (`ZADD`, `ZINCRBY`).
    Recorded,
    /// A read: `keymiss` if the key is missing.
    Read,
    /// An LWW write (`SET`, `GETSET`; `expire` too with a deadline), if it wrote.
    Set { expire: bool, always: bool },
    /// `DEL`, `GETDEL`: if a key went.
    Del,
    /// One event of `class` when `when` holds, and `del` if the op emptied the key.
    Event {
        class: u32,
        event: &'static str,
        when: When,
    },
    /// `EXPIRE` family and `PERSIST`.
    Expire { persist: bool },
    /// `GETEX` with a new deadline.
    GetEx { persist: bool },
    /// `LMOVE`: a push onto `dest`, then the pop from the key.
    Move {
        dest: Bytes,
        push: &'static str,
        pop: &'static str,
    },
}

/// When an [`What::Event`] is sent.
#[derive(Clone, Copy)]
enum When {
    /// The op reports a change (a count above 0, a value).
    Changed,
    /// The op succeeded.
    Ok,
    /// The op succeeded on a key that existed (`LTRIM` of a missing key does nothing).
    OkExisting,
}

/// An op's key and description, and the key's state before it ran.
struct Before {
    key: Bytes,
    what: What,
    was_live: bool,
    had_deadline: bool,
}

/// True if `r` reports a change (a count above 0, a value, a non-empty list, `Done`).
fn changed(r: &OpResult) -> bool {
    match r {
        OpResult::Int(n) => *n > 0,
        OpResult::Value(v) => v.is_some(),
        OpResult::Multi(v) => !v.is_empty(),
        OpResult::Done => true,
        OpResult::Type(_) | OpResult::Error(_) | OpResult::Reply(_) => false,
    }
}

impl Shard {
    /// Makes this shard record events while `flags` ask for them.
    pub fn set_keyspace_flags(&mut self, flags: Arc<Flags>) {
        self.keyspace_flags = Some(flags);
    }

    /// The events recorded since the last call (for the worker to publish).
    pub fn take_key_events(&mut self) -> Vec<KeyEvent> {
        if self.key_events.is_empty() {
            return Vec::new();
        }
        std::mem::take(&mut self.key_events)
    }

    /// The event classes to record now: 0 while notifications are off.
    pub(super) fn key_event_flags(&self) -> u32 {
        let flags = self.keyspace_flags.as_ref().map_or(0, |f| f.active());
        if flags != 0 && self.muted {
            return 0;
        }
        flags
    }

    /// Records `event` on `key` if its class is on.
    pub(super) fn note_event(&mut self, class: u32, event: &'static str, key: &[u8]) {
        if self.key_event_flags() & class != 0 {
            self.key_events.push(KeyEvent {
                event,
                key: Bytes::copy_from_slice(key),
            });
        }
    }

    /// A read of `key` on the fast path (`GET`): `keymiss` if it is missing and asked for.
    pub(crate) fn note_read(&mut self, key: &[u8]) {
        if self.key_event_flags() & notify::KEY_MISS != 0 && self.live(key).is_none() {
            self.note_event(notify::KEY_MISS, "keymiss", key);
        }
    }

    /// [`Shard::execute`] while notifications are on: the op, then its events.
    pub(super) fn execute_notified<B: AsRef<[u8]>>(&mut self, op: Op<B>) -> OpResult {
        let before = self.describe(&op);
        if matches!(before.what, What::Read) && !before.was_live {
            self.note_event(notify::KEY_MISS, "keymiss", &before.key);
        }
        let start = self.key_events.len();
        let result = self.execute_plain(op);
        self.record_events(before, &result, start);
        result
    }

    fn describe<B: AsRef<[u8]>>(&self, op: &Op<B>) -> Before {
        use notify::{HASH, LIST, SET, STRING, ZSET};
        use When::{Changed, Ok, OkExisting};
        let ev = |class, event, when| What::Event { class, event, when };
        let key = op.key();
        let what = match op {
            Op::Put { .. } | Op::Version { .. } | Op::Exec { .. } | Op::Script { .. } => {
                What::Nothing
            }
            Op::Assign { .. } => What::Set {
                expire: false,
                always: false,
            },
            Op::AssignTtl { deadline, .. } => What::Set {
                expire: matches!(deadline, Deadline::In(_) | Deadline::At(_)),
                always: false,
            },
            Op::GetSet { .. } => What::Set {
                expire: false,
                always: true,
            },
            Op::Delete { .. } | Op::GetDel { .. } => What::Del,
            Op::SetAdd { .. } => ev(SET, "sadd", Changed),
            Op::SetRemove { .. } => ev(SET, "srem", Changed),
            Op::SetPop { .. } => ev(SET, "spop", Changed),
            Op::CounterAdd { .. } | Op::IncrBy { .. } => ev(STRING, "incrby", Ok),
            Op::IncrByFloat { .. } => ev(STRING, "incrbyfloat", Ok),
            Op::Append { .. } => ev(STRING, "append", Ok),
            Op::SetRange { value, .. } if value.as_ref().is_empty() => What::Nothing,
            Op::SetRange { .. } => ev(STRING, "setrange", Ok),
            Op::Expire { deadline, .. } => What::Expire {
                persist: *deadline == Deadline::Persist,
            },
            Op::GetEx {
                deadline: Some(d), ..
            } => What::GetEx {
                persist: *d == Deadline::Persist,
            },
            Op::List { op, .. } => match op {
                ListOp::Push { front, .. } => {
                    ev(LIST, if *front { "lpush" } else { "rpush" }, Changed)
                }
                ListOp::Pop { front, .. } => {
                    ev(LIST, if *front { "lpop" } else { "rpop" }, Changed)
                }
                ListOp::Set { .. } => ev(LIST, "lset", OkExisting),
                ListOp::Rem { .. } => ev(LIST, "lrem", Changed),
                ListOp::Trim { .. } => ev(LIST, "ltrim", OkExisting),
                ListOp::Insert { .. } => ev(LIST, "linsert", Changed),
                ListOp::Move {
                    dest,
                    from_front,
                    to_front,
                } => What::Move {
                    dest: Bytes::copy_from_slice(dest.as_ref()),
                    push: if *to_front { "lpush" } else { "rpush" },
                    pop: if *from_front { "lpop" } else { "rpop" },
                },
                _ => What::Read,
            },
            Op::Hash { args, .. } => {
                let name = args.first().map(|a| a.as_ref().to_ascii_uppercase());
                match name.as_deref() {
                    Some(b"HSET" | b"HMSET") => ev(HASH, "hset", Ok),
                    Some(b"HSETNX") => ev(HASH, "hset", Changed),
                    Some(b"HDEL") => ev(HASH, "hdel", Changed),
                    Some(b"HINCRBY") => ev(HASH, "hincrby", Ok),
                    Some(b"HINCRBYFLOAT") => ev(HASH, "hincrbyfloat", Ok),
                    _ => What::Read,
                }
            }
            Op::Zset { args, .. } => {
                let name = args.first().map(|a| a.as_ref().to_ascii_uppercase());
                match name.as_deref() {
                    // `zadd`/`zincr` only if a score changed: recorded by `zadd` itself.
                    Some(b"ZADD" | b"ZINCRBY") => What::Recorded,
                    Some(b"ZREM") => ev(ZSET, "zrem", Changed),
                    Some(b"ZPOPMIN") => ev(ZSET, "zpopmin", Changed),
                    Some(b"ZPOPMAX") => ev(ZSET, "zpopmax", Changed),
                    Some(b"ZREMRANGEBYSCORE") => ev(ZSET, "zremrangebyscore", Changed),
                    Some(b"ZREMRANGEBYRANK") => ev(ZSET, "zremrangebyrank", Changed),
                    Some(b"ZREMRANGEBYLEX") => ev(ZSET, "zremrangebylex", Changed),
                    _ => What::Read,
                }
            }
            Op::GetEx { deadline: None, .. }
            | Op::Get { .. }
            | Op::GetMeta { .. }
            | Op::Exists { .. }
            | Op::TypeOf { .. }
            | Op::SetContains { .. }
            | Op::SetLen { .. }
            | Op::Ttl { .. }
            | Op::ExpireTime { .. } => What::Read,
        };
        let live = self.live(key);
        Before {
            key: Bytes::copy_from_slice(key),
            was_live: live.is_some(),
            had_deadline: live.is_some_and(|r| super::expiry::deadline_of(&r).is_some()),
            what,
        }
    }

    /// Records the events of an op whose own recording (and `expired`) began at `start`.
    fn record_events(&mut self, before: Before, result: &OpResult, start: usize) {
        use notify::{GENERIC, LIST, STRING};
        let ok = !matches!(result, OpResult::Error(_));
        let key = &before.key[..];
        let live = self.live(key).is_some();
        let writes = !matches!(before.what, What::Nothing | What::Read);
        if writes && ok && !before.was_live && live && self.key_event_flags() & notify::NEW != 0 {
            // Before the command's own events, after an `expired` of the old key.
            let at = start
                + self.key_events[start..]
                    .iter()
                    .take_while(|e| e.event == "expired")
                    .count();
            let new = KeyEvent {
                event: "new",
                key: before.key.clone(),
            };
            self.key_events.insert(at, new);
        }
        match before.what {
            What::Nothing | What::Read | What::Recorded => {}
            What::Set { expire, always } => {
                if (always && ok) || changed(result) {
                    self.note_event(STRING, "set", key);
                    if expire {
                        self.note_event(GENERIC, "expire", key);
                    }
                    if expire && !live {
                        // A deadline already past: gone at once here; Redis sends
                        // `expired` at its next expiry cycle or access.
                        self.note_event(notify::EXPIRED, "expired", key);
                    }
                }
            }
            What::Del => {
                if changed(result) {
                    self.note_event(GENERIC, "del", key);
                }
            }
            What::Event { class, event, when } => {
                let done = match when {
                    When::Changed => changed(result),
                    When::Ok => ok,
                    When::OkExisting => ok && before.was_live,
                };
                if done {
                    self.note_event(class, event, key);
                    if !live && before.was_live {
                        self.note_event(GENERIC, "del", key);
                    }
                }
            }
            What::Expire { persist } => {
                if changed(result) {
                    let event = match (persist, live) {
                        (true, _) => "persist",
                        (false, true) => "expire",
                        (false, false) => "del",
                    };
                    self.note_event(GENERIC, event, key);
                }
            }
            What::GetEx { persist } => {
                if changed(result) {
                    match (persist, live) {
                        (true, _) if before.had_deadline => {
                            self.note_event(GENERIC, "persist", key)
                        }
                        (true, _) => {}
                        (false, true) => self.note_event(GENERIC, "expire", key),
                        (false, false) => self.note_event(GENERIC, "del", key),
                    }
                }
            }
            What::Move { dest, push, pop } => {
                if changed(result) {
                    self.note_event(LIST, push, &dest);
                    self.note_event(LIST, pop, key);
                    if !live {
                        self.note_event(GENERIC, "del", key);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "notify_tests.rs"]
mod tests;
