//! List commands: `LPUSH`, `RPUSH`, `LPUSHX`, `RPUSHX`, `LPOP`, `RPOP`, `LRANGE`, `LLEN`,
//! `LINDEX`, `LSET`, `LREM`, `LTRIM`, `LINSERT`, `LPOS`, `LMOVE`, `RPOPLPUSH`, and the blocking
//! `BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH`.
//!
//! Each command is one [`ListOp`] run at the key's worker (`shard::lists`). `LMOVE`'s keys
//! must share a worker (`-CROSSSLOT` otherwise, nothing moved).
//!
//! # Blocking pops
//! A blocking pop first tries its keys in argument order (the first non-empty one wins),
//! each try a non-blocking pop at the key's worker, so keys on different workers work.
//! If all are empty the connection's reply waits in a task of its own, which retries
//! when any list push happens in the process ([`pushed`]) and at least every
//! [`RECHECK`] (pushes merged from other replicas do not notify), until the timeout
//! (float seconds, 0 = forever) answers a null array. At most [`MAX_WAITERS`] connections
//! of a process wait at once (more get an error). The connection watches its socket while
//! it waits: a client that closes it drops the waiter, which then pops nothing. Blocked
//! connections of one process are served in order of arrival per key (a waiter retries a
//! key only while it is the first waiting there, see `Queued`); connections of different
//! nodes are not ordered. Inside `MULTI` a blocking pop does not block: it is the
//! non-blocking pop (`BLPOP`/`BRPOP` with one key only).

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lattice::Value;
use wire::resp::{self, Version};

use super::commands::{arity_error, parse_i64, permit, syntax_error, Cmd, Plan};
use super::reply::{err, write_error, Shape};
use super::ConnState;
use crate::ack::Ack;
use crate::auth::User;
use crate::core::Routing;
use crate::driver::worker::Worker;
use crate::front::pipeline::Replies;
use crate::list_op::{pushed, ListOp};
use crate::op::{Op, OpResult};

/// Most connections of a process blocked in a pop at once.
pub(crate) const MAX_WAITERS: usize = 10_000;

/// How often a blocked pop re-checks its keys without a local push.
pub(crate) const RECHECK: Duration = Duration::from_millis(100);

/// Longest timeout honoured (longer ones wait this long).
const MAX_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How a list reply is encoded.
#[derive(Debug)]
pub(crate) enum ListShape {
    /// An array of elements (`LRANGE`, pops with a count); a null array if absent.
    Items,
    /// `[key, element]` (`BLPOP` inside `MULTI`), or a null array.
    KeyItem(Vec<u8>),
    /// `LPOS` without `COUNT`: an integer, or null.
    Index,
    /// `LPOS … COUNT`: an array of integers.
    Indexes,
}

fn bulk_of(r: &OpResult) -> Option<&[u8]> {
    match r {
        OpResult::Value(Some(Value::Lww(l))) => Some(&l.value),
        _ => None,
    }
}

/// Encodes a list reply.
pub(super) fn encode(out: &mut Vec<u8>, v: Version, shape: &ListShape, first: Option<&OpResult>) {
    match (shape, first) {
        (ListShape::Items, Some(OpResult::Multi(items))) => {
            resp::array_header(out, items.len());
            for i in items {
                resp::bulk(out, bulk_of(i).unwrap_or_default());
            }
        }
        (ListShape::KeyItem(key), Some(r)) if bulk_of(r).is_some() => {
            resp::array_header(out, 2);
            resp::bulk(out, key);
            resp::bulk(out, bulk_of(r).unwrap_or_default());
        }
        (ListShape::Index, Some(OpResult::Int(i))) => resp::integer(out, *i),
        (ListShape::Index, _) => resp::null(out, v),
        (ListShape::Indexes, Some(OpResult::Multi(items))) => {
            resp::array_header(out, items.len());
            for i in items {
                resp::integer(out, if let OpResult::Int(n) = i { *n } else { 0 });
            }
        }
        (ListShape::Indexes, _) => resp::array_header(out, 0),
        _ => resp::null_array(out, v),
    }
}

const NOT_INT: &str = "ERR value is not an integer or out of range";

fn side(b: &[u8]) -> Option<bool> {
    if b.eq_ignore_ascii_case(b"LEFT") {
        Some(true)
    } else if b.eq_ignore_ascii_case(b"RIGHT") {
        Some(false)
    } else {
        None
    }
}

fn list<'a>(shape: Shape, key: &'a [u8], op: ListOp<&'a [u8]>) -> Plan<'a> {
    Plan::One(shape, Op::List { key, op })
}

/// The plan of list command `name` (upper case), or `None` if it is not one.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>) -> Option<Plan<'a>> {
    let argc = cmd.len();
    let arity = || Some(Plan::Reply(arity_error(cmd)));
    let key = cmd.arg(1);
    let int = |i: usize| parse_i64(cmd.arg(i));
    Some(match name {
        b"LPUSH" | b"RPUSH" | b"LPUSHX" | b"RPUSHX" => {
            if argc < 3 {
                return arity();
            }
            let op = ListOp::Push {
                values: (2..argc).map(|i| cmd.arg(i)).collect(),
                front: name[0] == b'L',
                if_exists: name.len() == 6,
            };
            list(Shape::Int, key, op)
        }
        b"LPOP" | b"RPOP" => {
            if !(2..=3).contains(&argc) {
                return arity();
            }
            let front = name[0] == b'L';
            if argc == 2 {
                return Some(list(Shape::Get, key, ListOp::Pop { front, count: None }));
            }
            match int(2).and_then(|c| u64::try_from(c).ok()) {
                None => Plan::Reply(err("ERR value is out of range, must be positive")),
                Some(c) => list(
                    Shape::List(ListShape::Items),
                    key,
                    ListOp::Pop {
                        front,
                        count: Some(c),
                    },
                ),
            }
        }
        b"LRANGE" | b"LTRIM" => {
            if argc != 4 {
                return arity();
            }
            let (Some(start), Some(stop)) = (int(2), int(3)) else {
                return Some(Plan::Reply(err(NOT_INT)));
            };
            if name == b"LRANGE" {
                list(
                    Shape::List(ListShape::Items),
                    key,
                    ListOp::Range { start, stop },
                )
            } else {
                list(Shape::Ok, key, ListOp::Trim { start, stop })
            }
        }
        b"LLEN" => {
            if argc != 2 {
                return arity();
            }
            list(Shape::Int, key, ListOp::Len)
        }
        b"LINDEX" => {
            if argc != 3 {
                return arity();
            }
            match int(2) {
                None => Plan::Reply(err(NOT_INT)),
                Some(index) => list(Shape::Get, key, ListOp::Index { index }),
            }
        }
        b"LSET" => {
            if argc != 4 {
                return arity();
            }
            match int(2) {
                None => Plan::Reply(err(NOT_INT)),
                Some(index) => list(
                    Shape::Ok,
                    key,
                    ListOp::Set {
                        index,
                        value: cmd.arg(3),
                    },
                ),
            }
        }
        b"LREM" => {
            if argc != 4 {
                return arity();
            }
            match int(2) {
                None => Plan::Reply(err(NOT_INT)),
                Some(count) => list(
                    Shape::Int,
                    key,
                    ListOp::Rem {
                        count,
                        value: cmd.arg(3),
                    },
                ),
            }
        }
        b"LPOS" => {
            if argc < 3 || argc.is_multiple_of(2) {
                return if argc < 3 {
                    arity()
                } else {
                    Some(Plan::Reply(syntax_error()))
                };
            }
            let (mut rank, mut count, mut maxlen) = (1i64, None, 0u64);
            for i in (3..argc).step_by(2) {
                let opt = cmd.arg(i);
                let Some(n) = int(i + 1) else {
                    return Some(Plan::Reply(err(NOT_INT)));
                };
                if opt.eq_ignore_ascii_case(b"RANK") {
                    if n == 0 || n == i64::MIN {
                        return Some(Plan::Reply(err(
                            "ERR RANK can't be zero: use 1 to start from the first match, 2 \
                             from the second ... or use negative to start from the end of the \
                             list",
                        )));
                    }
                    rank = n;
                } else if opt.eq_ignore_ascii_case(b"COUNT") {
                    let Ok(c) = u64::try_from(n) else {
                        return Some(Plan::Reply(err("ERR COUNT can't be negative")));
                    };
                    count = Some(c);
                } else if opt.eq_ignore_ascii_case(b"MAXLEN") {
                    let Ok(m) = u64::try_from(n) else {
                        return Some(Plan::Reply(err("ERR MAXLEN can't be negative")));
                    };
                    maxlen = m;
                } else {
                    return Some(Plan::Reply(syntax_error()));
                }
            }
            let shape = if count.is_some() {
                ListShape::Indexes
            } else {
                ListShape::Index
            };
            let op = ListOp::Pos {
                value: cmd.arg(2),
                rank,
                count,
                maxlen,
            };
            list(Shape::List(shape), key, op)
        }
        b"LINSERT" => {
            if argc != 5 {
                return arity();
            }
            let where_ = cmd.arg(2);
            let after = if where_.eq_ignore_ascii_case(b"AFTER") {
                true
            } else if where_.eq_ignore_ascii_case(b"BEFORE") {
                false
            } else {
                return Some(Plan::Reply(syntax_error()));
            };
            let op = ListOp::Insert {
                after,
                pivot: cmd.arg(3),
                value: cmd.arg(4),
            };
            list(Shape::Int, key, op)
        }
        b"LMOVE" | b"BLMOVE" => {
            if argc != if name == b"LMOVE" { 5 } else { 6 } {
                return arity();
            }
            let (Some(from_front), Some(to_front)) = (side(cmd.arg(3)), side(cmd.arg(4))) else {
                return Some(Plan::Reply(syntax_error()));
            };
            if name == b"BLMOVE" {
                if let Err(e) = timeout(cmd.arg(5)) {
                    return Some(Plan::Reply(e));
                }
            }
            let op = ListOp::Move {
                dest: cmd.arg(2),
                from_front,
                to_front,
            };
            list(Shape::Get, key, op)
        }
        b"RPOPLPUSH" | b"BRPOPLPUSH" => {
            if argc != if name == b"RPOPLPUSH" { 3 } else { 4 } {
                return arity();
            }
            if name == b"BRPOPLPUSH" {
                if let Err(e) = timeout(cmd.arg(3)) {
                    return Some(Plan::Reply(e));
                }
            }
            let op = ListOp::Move {
                dest: cmd.arg(2),
                from_front: false,
                to_front: true,
            };
            list(Shape::Get, key, op)
        }
        // Inside MULTI (outside, `blocking` runs them): the non-blocking pop.
        b"BLPOP" | b"BRPOP" => {
            if argc < 3 {
                return arity();
            }
            if let Err(e) = timeout(cmd.arg(argc - 1)) {
                return Some(Plan::Reply(e));
            }
            if argc > 3 {
                return Some(Plan::Reply(err(
                    "ERR BLPOP/BRPOP with several keys inside MULTI is not supported by \
                     latticekv (the keys may be on different workers): use one key",
                )));
            }
            let op = ListOp::Pop {
                front: name[1] == b'L',
                count: None,
            };
            list(Shape::List(ListShape::KeyItem(key.to_vec())), key, op)
        }
        _ => return None,
    })
}

/// A blocking command's timeout: `None` waits forever.
fn timeout(arg: &[u8]) -> Result<Option<Duration>, Vec<u8>> {
    let secs = std::str::from_utf8(arg)
        .ok()
        .filter(|s| !s.is_empty() && s.trim() == *s)
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|x| x.is_finite())
        .ok_or_else(|| err("ERR timeout is not a float or out of range"))?;
    if secs < 0.0 {
        return Err(err("ERR timeout is negative"));
    }
    if secs == 0.0 {
        return Ok(None);
    }
    Ok(Some(Duration::from_secs_f64(secs).min(MAX_TIMEOUT)))
}

/// Connections of this process blocked in a pop.
static WAITERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One blocked connection, counted while it lives.
struct Waiter;

impl Waiter {
    fn take() -> Option<Waiter> {
        use std::sync::atomic::Ordering::SeqCst;
        let prev = WAITERS.fetch_add(1, SeqCst);
        if prev >= MAX_WAITERS {
            WAITERS.fetch_sub(1, SeqCst);
            return None;
        }
        Some(Waiter)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        WAITERS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs a blocking pop (`BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH`) outside `MULTI`; false
/// if `cmd` is not one.
pub(super) fn blocking(
    w: &Rc<Worker>,
    state: &mut ConnState,
    cmd: &Cmd<'_>,
    user: Option<&User>,
    replies: &mut Replies,
) -> bool {
    let name = cmd.arg(0);
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    let argc = cmd.len();
    let (pops, key_item, timeout_arg): (Vec<Pop>, bool, &[u8]) = if is("BLPOP") || is("BRPOP") {
        if argc < 3 {
            replies.emit(|o| o.extend_from_slice(&arity_error(cmd)));
            return true;
        }
        let front = is("BLPOP");
        let pops = (1..argc - 1)
            .map(|i| {
                let key = Bytes::copy_from_slice(cmd.arg(i));
                (key, ListOp::Pop { front, count: None })
            })
            .collect();
        (pops, true, cmd.arg(argc - 1))
    } else if is("BLMOVE") || is("BRPOPLPUSH") {
        // The plan checks the arguments; its op is the one to retry.
        let name = if is("BLMOVE") {
            &b"BLMOVE"[..]
        } else {
            b"BRPOPLPUSH"
        };
        match plan(name, cmd) {
            Some(Plan::One(_, Op::List { key, op })) => (
                vec![(Bytes::copy_from_slice(key), op.to_owned_op())],
                false,
                cmd.arg(argc - 1),
            ),
            Some(Plan::Reply(bytes)) => {
                replies.emit(|o| o.extend_from_slice(&bytes));
                return true;
            }
            _ => return false,
        }
    } else {
        return false;
    };
    let timeout = match timeout(timeout_arg) {
        Ok(t) => t,
        Err(e) => {
            replies.emit(|o| o.extend_from_slice(&e));
            return true;
        }
    };
    if let Some(u) = user {
        let ops: Vec<Op<&[u8]>> = pops
            .iter()
            .map(|(key, op)| Op::List {
                key: &key[..],
                op: match op {
                    ListOp::Move {
                        dest,
                        from_front,
                        to_front,
                    } => ListOp::Move {
                        dest: &dest[..],
                        from_front: *from_front,
                        to_front: *to_front,
                    },
                    ListOp::Pop { front, count } => ListOp::Pop {
                        front: *front,
                        count: *count,
                    },
                    _ => ListOp::Len,
                },
            })
            .collect();
        if let Err(e) = permit(u, &Plan::Ops(Shape::Ok, ops)) {
            replies.emit(|o| o.extend_from_slice(&super::acl::noperm(&e, cmd)));
            return true;
        }
    }
    let v = state.version;
    let w = w.clone();
    replies.later_blocking(async move { wait_pop(w, pops, key_item, timeout, v).await });
    true
}

/// The connections of this process blocked on each key, by ticket (order of arrival).
type Queues = std::collections::HashMap<Bytes, std::collections::BTreeSet<u64>>;

fn queues() -> &'static std::sync::Mutex<Queues> {
    static QUEUES: std::sync::OnceLock<std::sync::Mutex<Queues>> = std::sync::OnceLock::new();
    QUEUES.get_or_init(Default::default)
}

/// A blocked connection's place in the queues of its keys: it pops from a key only while
/// it is the first there, so the waiters of a process are served in order of arrival.
struct Queued {
    ticket: u64,
    keys: Vec<Bytes>,
}

impl Queued {
    fn join(keys: Vec<Bytes>) -> Queued {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let ticket = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut q = queues().lock().unwrap_or_else(|e| e.into_inner());
        for k in &keys {
            q.entry(k.clone()).or_default().insert(ticket);
        }
        Queued { ticket, keys }
    }

    /// True if no connection of this process has waited longer for `key`.
    fn first_on(&self, key: &Bytes) -> bool {
        let q = queues().lock().unwrap_or_else(|e| e.into_inner());
        q.get(key)
            .and_then(|t| t.first())
            .is_none_or(|&t| t == self.ticket)
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        let mut q = queues().lock().unwrap_or_else(|e| e.into_inner());
        for k in &self.keys {
            if let Some(t) = q.get_mut(k) {
                t.remove(&self.ticket);
                if t.is_empty() {
                    q.remove(k);
                }
            }
        }
        drop(q);
        // The next waiter may now be first on a key that still has elements.
        pushed().notify_waiters();
    }
}

/// A key and the pop to try on it.
type Pop = (Bytes, ListOp<Bytes>);

/// Tries the pops in order until one returns an element, waiting for pushes between
/// rounds, until `timeout`.
async fn wait_pop(
    w: Rc<Worker>,
    pops: Vec<Pop>,
    key_item: bool,
    timeout: Option<Duration>,
    v: Version,
) -> Vec<u8> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut waiter: Option<(Waiter, Queued)> = None;
    let first = Cell::new(true);
    loop {
        let notified = pushed().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        for (key, op) in &pops {
            if waiter.as_ref().is_some_and(|(_, q)| !q.first_on(key)) {
                continue;
            }
            let op = Op::List {
                key: key.clone(),
                op: op.clone(),
            };
            let results = w.submit(vec![op], Ack::MERGED, Routing::Forward);
            let results = results.results().await;
            let mut out = Vec::new();
            match results.first() {
                Some(OpResult::Error(e)) => {
                    write_error(&mut out, e);
                    return out;
                }
                Some(r) => {
                    if let Some(b) = bulk_of(r) {
                        if key_item {
                            resp::array_header(&mut out, 2);
                            resp::bulk(&mut out, key);
                        }
                        resp::bulk(&mut out, b);
                        return out;
                    }
                }
                None => {}
            }
        }
        if first.replace(false) {
            match Waiter::take() {
                Some(t) => {
                    let keys = pops.iter().map(|(k, _)| k.clone()).collect();
                    waiter = Some((t, Queued::join(keys)));
                }
                None => {
                    return err(&format!(
                        "ERR too many blocked clients (at most {MAX_WAITERS} per process)"
                    ))
                }
            }
        }
        let expired = deadline.is_some_and(|d| Instant::now() >= d);
        if expired {
            drop(waiter);
            let mut out = Vec::new();
            resp::null_array(&mut out, v);
            return out;
        }
        let recheck = Instant::now() + RECHECK;
        let wake = deadline.map_or(recheck, |d| d.min(recheck));
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}
