//! Blocking pops: `BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH` outside `MULTI`.
//!
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

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wire::resp::{self, Version};

use super::commands::{arity_error, permit, Cmd, Plan};
use super::lists::{bulk_of, plan, timeout};
use super::reply::{err, write_error, Shape};
use super::ConnState;
use crate::ack::Ack;
use crate::auth::User;
use crate::core::Routing;
use crate::driver::worker::Worker;
use crate::front::pipeline::Replies;
use crate::list_op::{pushed, ListOp, Waiter, MAX_WAITERS};
use crate::op::{Op, OpResult};

/// How often a blocked pop re-checks its keys without a local push.
pub(crate) const RECHECK: Duration = Duration::from_millis(100);

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
    // Counted before the first try, so a push from now on notifies (see `Waiter`).
    let Some(_waiter) = Waiter::take() else {
        return err(&format!(
            "ERR too many blocked clients (at most {MAX_WAITERS} per process)"
        ));
    };
    let mut queued: Option<Queued> = None;
    loop {
        let notified = pushed().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        for (key, op) in &pops {
            if queued.as_ref().is_some_and(|q| !q.first_on(key)) {
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
        if queued.is_none() {
            queued = Some(Queued::join(pops.iter().map(|(k, _)| k.clone()).collect()));
        }
        let expired = deadline.is_some_and(|d| Instant::now() >= d);
        if expired {
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
