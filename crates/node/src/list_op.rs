//! [`ListOp`]: the RESP list operations (`Op::List`), run at the key's worker
//! (`shard::lists`), and their forwarding encoding.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

use bytes::Bytes;
use wire::pb;

use crate::error::NodeError;

/// Woken on every local list push, for blocked pops (`BLPOP` …) on any worker of the
/// process; pushes merged from other replicas are seen by the waiters' periodic re-check.
pub fn pushed() -> &'static tokio::sync::Notify {
    static PUSHED: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
    PUSHED.get_or_init(tokio::sync::Notify::new)
}

/// Most connections of a process blocked in a pop at once.
pub const MAX_WAITERS: usize = 10_000;

/// Connections of this process blocked in a pop (or about to be).
static WAITERS: AtomicUsize = AtomicUsize::new(0);

/// One connection in a blocking pop, counted while it lives. Taken before the pop's first
/// try: a push that lands after that try sees the count and notifies ([`notify_pushed`]).
pub struct Waiter(());

impl Waiter {
    /// Counts one more waiter; `None` if [`MAX_WAITERS`] already wait.
    pub fn take() -> Option<Waiter> {
        if WAITERS.fetch_add(1, SeqCst) >= MAX_WAITERS {
            WAITERS.fetch_sub(1, SeqCst);
            return None;
        }
        Some(Waiter(()))
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        WAITERS.fetch_sub(1, SeqCst);
    }
}

/// Wakes the blocked pops after a list push (nothing to do, and no shared lock taken, when
/// none waits: the push hot path).
pub fn notify_pushed() {
    if WAITERS.load(SeqCst) > 0 {
        pushed().notify_waiters();
    }
}

/// Most elements one pop with a count returns (bounds the reply).
pub const MAX_POP: u64 = 1 << 20;

/// One operation on the list at an [`crate::op::Op::List`]'s key.
#[derive(Clone, Debug, PartialEq)]
pub enum ListOp<B> {
    /// `LPUSH`/`RPUSH` (`LPUSHX`/`RPUSHX` with `if_exists`). → `Int` the new length.
    Push {
        /// The values, pushed one after the other.
        values: Vec<B>,
        /// At the head.
        front: bool,
        /// Only if the list exists.
        if_exists: bool,
    },
    /// `LPOP`/`RPOP`. → `Value(None)` if absent; without a count one element
    /// (`Value(Some(Lww))`), with one `Multi` of elements.
    Pop {
        /// From the head.
        front: bool,
        /// How many (`None`: one, replied as a single element).
        count: Option<u64>,
    },
    /// `LRANGE`. → `Multi` of elements.
    Range {
        /// First index (negative from the tail).
        start: i64,
        /// Last index, inclusive.
        stop: i64,
    },
    /// `LLEN`. → `Int`.
    Len,
    /// `LINDEX`. → `Value`.
    Index {
        /// The index.
        index: i64,
    },
    /// `LSET`. → `Done`, or an error.
    Set {
        /// The index.
        index: i64,
        /// The new value.
        value: B,
    },
    /// `LREM`. → `Int` removed.
    Rem {
        /// How many (0 all, negative from the tail).
        count: i64,
        /// The value to remove.
        value: B,
    },
    /// `LTRIM`. → `Done`.
    Trim {
        /// First index kept.
        start: i64,
        /// Last index kept.
        stop: i64,
    },
    /// `LINSERT`. → `Int` the new length, -1 without the pivot, 0 without the list.
    Insert {
        /// After the pivot (else before).
        after: bool,
        /// The element to insert next to.
        pivot: B,
        /// The new element.
        value: B,
    },
    /// `LPOS`. → without a count `Int` the index or `Value(None)`; with one `Multi` of
    /// `Int`s.
    Pos {
        /// The element to find.
        value: B,
        /// Which match first (1 the first, -1 the last; never 0).
        rank: i64,
        /// How many matches (`Some(0)`: all); `None`: one, replied as an integer.
        count: Option<u64>,
        /// Compare at most this many elements (0: all).
        maxlen: u64,
    },
    /// `LMOVE`/`RPOPLPUSH`: pop from this key, push onto `dest` (held by the same
    /// worker, else `-CROSSSLOT`). → `Value` the element moved.
    Move {
        /// The destination list.
        dest: B,
        /// Pop from the head.
        from_front: bool,
        /// Push at the head.
        to_front: bool,
    },
}

impl<B: AsRef<[u8]>> ListOp<B> {
    /// True if the op may change the store.
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            ListOp::Range { .. } | ListOp::Len | ListOp::Index { .. } | ListOp::Pos { .. }
        )
    }

    /// A second key the op writes, if any (`LMOVE`'s destination).
    pub fn other_key(&self) -> Option<&[u8]> {
        match self {
            ListOp::Move { dest, .. } => Some(dest.as_ref()),
            _ => None,
        }
    }

    /// An owned copy.
    pub fn to_owned_op(&self) -> ListOp<Bytes> {
        let b = |x: &B| Bytes::copy_from_slice(x.as_ref());
        match self {
            ListOp::Push {
                values,
                front,
                if_exists,
            } => ListOp::Push {
                values: values.iter().map(b).collect(),
                front: *front,
                if_exists: *if_exists,
            },
            ListOp::Pop { front, count } => ListOp::Pop {
                front: *front,
                count: *count,
            },
            ListOp::Range { start, stop } => ListOp::Range {
                start: *start,
                stop: *stop,
            },
            ListOp::Len => ListOp::Len,
            ListOp::Index { index } => ListOp::Index { index: *index },
            ListOp::Set { index, value } => ListOp::Set {
                index: *index,
                value: b(value),
            },
            ListOp::Rem { count, value } => ListOp::Rem {
                count: *count,
                value: b(value),
            },
            ListOp::Trim { start, stop } => ListOp::Trim {
                start: *start,
                stop: *stop,
            },
            ListOp::Insert {
                after,
                pivot,
                value,
            } => ListOp::Insert {
                after: *after,
                pivot: b(pivot),
                value: b(value),
            },
            ListOp::Pos {
                value,
                rank,
                count,
                maxlen,
            } => ListOp::Pos {
                value: b(value),
                rank: *rank,
                count: *count,
                maxlen: *maxlen,
            },
            ListOp::Move {
                dest,
                from_front,
                to_front,
            } => ListOp::Move {
                dest: b(dest),
                from_front: *from_front,
                to_front: *to_front,
            },
        }
    }
}

/// Encodes a list op for forwarding.
pub fn to_pb(op: &ListOp<Bytes>) -> pb::ListForward {
    let mut out = pb::ListForward::default();
    match op {
        ListOp::Push {
            values,
            front,
            if_exists,
        } => {
            out.kind = 1;
            out.args = values.clone();
            out.front = *front;
            out.flag = *if_exists;
        }
        ListOp::Pop { front, count } => {
            out.kind = 2;
            out.front = *front;
            out.flag = count.is_some();
            out.a = count.map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX));
        }
        ListOp::Range { start, stop } => (out.kind, out.a, out.b) = (3, *start, *stop),
        ListOp::Len => out.kind = 4,
        ListOp::Index { index } => (out.kind, out.a) = (5, *index),
        ListOp::Set { index, value } => {
            (out.kind, out.a) = (6, *index);
            out.args = vec![value.clone()];
        }
        ListOp::Rem { count, value } => {
            (out.kind, out.a) = (7, *count);
            out.args = vec![value.clone()];
        }
        ListOp::Trim { start, stop } => (out.kind, out.a, out.b) = (8, *start, *stop),
        ListOp::Insert {
            after,
            pivot,
            value,
        } => {
            out.kind = 9;
            out.flag = *after;
            out.args = vec![pivot.clone(), value.clone()];
        }
        ListOp::Move {
            dest,
            from_front,
            to_front,
        } => {
            out.kind = 10;
            out.front = *from_front;
            out.flag = *to_front;
            out.args = vec![dest.clone()];
        }
        ListOp::Pos {
            value,
            rank,
            count,
            maxlen,
        } => {
            (out.kind, out.a) = (11, *rank);
            out.b = i64::try_from(*maxlen).unwrap_or(i64::MAX);
            out.flag = count.is_some();
            out.c = count.map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX));
            out.args = vec![value.clone()];
        }
    }
    out
}

/// Decodes a forwarded list op.
pub fn from_pb(l: pb::ListForward) -> Result<ListOp<Bytes>, NodeError> {
    let bad = |what: &str| NodeError::BadRequest(format!("forwarded list op: {what}"));
    let mut args = l.args.into_iter();
    let mut arg = || args.next().ok_or_else(|| bad("missing argument"));
    Ok(match l.kind {
        1 => ListOp::Push {
            values: std::iter::from_fn(|| arg().ok()).collect(),
            front: l.front,
            if_exists: l.flag,
        },
        2 => ListOp::Pop {
            front: l.front,
            count: l
                .flag
                .then(|| u64::try_from(l.a).map_err(|_| bad("negative count")))
                .transpose()?,
        },
        3 => ListOp::Range {
            start: l.a,
            stop: l.b,
        },
        4 => ListOp::Len,
        5 => ListOp::Index { index: l.a },
        6 => ListOp::Set {
            index: l.a,
            value: arg()?,
        },
        7 => ListOp::Rem {
            count: l.a,
            value: arg()?,
        },
        8 => ListOp::Trim {
            start: l.a,
            stop: l.b,
        },
        9 => ListOp::Insert {
            after: l.flag,
            pivot: arg()?,
            value: arg()?,
        },
        10 => ListOp::Move {
            dest: arg()?,
            from_front: l.front,
            to_front: l.flag,
        },
        11 => ListOp::Pos {
            value: arg()?,
            rank: l.a,
            count: l
                .flag
                .then(|| u64::try_from(l.c).map_err(|_| bad("negative count")))
                .transpose()?,
            maxlen: u64::try_from(l.b).map_err(|_| bad("negative maxlen"))?,
        },
        _ => return Err(bad("unknown kind")),
    })
}
