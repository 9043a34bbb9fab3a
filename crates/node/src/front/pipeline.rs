//! The connection pipeline both client protocols share.
//!
//! A connection reads what the client sent, then takes every complete request from the
//! buffer (at most [`MAX_PIPELINE`] before writing) through its protocol's [`Codec`], which
//! runs it and queues its reply; then it writes every reply, in request order, with one
//! write. A reply known at once is encoded straight into the output buffer; one that waits
//! (for another worker, the disk, other replicas) holds its place in the queue while the
//! requests behind it run, so pipelined requests share one fsync and one round trip.
//!
//! Bad input ends the connection only when the protocol cannot resynchronise (the codec
//! says so, after queueing its error); other clients are never affected.
//!
//! # Limits
//! - A batch stops taking requests once its replies reach `max_reply_bytes` (as it does at
//!   [`MAX_PIPELINE`] requests): they are written before more requests run, so a pipeline of
//!   large GETs does not pile up its replies in memory.
//! - A request must arrive within `partial_request_timeout_secs` of its first byte, and a
//!   connection with nothing pending is closed after `idle_timeout_secs` (if set; not while
//!   it waits for pushes): see [`ReadClock`].

use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::task::Poll;
use std::time::Instant;

use bytes::BytesMut;
use tls::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::spawn_local;

use crate::driver::conns::{ConnectionPermit, LocalConnection};
use crate::driver::worker::{Answer, Worker};
use crate::op::OpResult;
use crate::stats::requests::Command;

pub use super::read_clock::ReadClock;

/// Most requests a connection runs before it writes their replies (bounds the reply queue).
pub const MAX_PIPELINE: usize = 1024;

/// Turns a request's results into its reply.
pub type Encode = Box<dyn FnOnce(Vec<OpResult>, &mut Vec<u8>)>;

/// A reply that is not known yet.
enum Waiting {
    /// Encoded already (behind one that waits).
    Bytes(Vec<u8>),
    /// Results from the worker, to encode.
    Results(oneshot::Receiver<Vec<OpResult>>, Encode),
    /// Bytes from a task of its own.
    Later(oneshot::Receiver<Vec<u8>>),
}

/// The replies of a batch of requests, in request order.
#[derive(Default)]
pub struct Replies {
    /// Bytes to write.
    pub out: Vec<u8>,
    queue: VecDeque<Waiting>,
    // ---- lists (helper B) ----
    /// Set while a reply of the batch is a blocked pop: the connection then watches its
    /// socket, so a client that closes drops the waiter.
    blocked: Rc<std::cell::Cell<bool>>,
    /// The batch's requests, for their counts: each one's command and where its reply
    /// starts, as (queued replies, bytes in `out`) when it ran.
    marks: Vec<(Command, usize, usize)>,
    /// Where each queued reply of the batch started in `out` once settled.
    starts: Vec<usize>,
}

impl Replies {
    /// True if nothing waits before the next reply (it can go straight into `out`).
    pub fn direct(&self) -> bool {
        self.queue.is_empty()
    }

    /// A reply known now, encoded by `f`.
    pub fn emit(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        if self.queue.is_empty() {
            f(&mut self.out);
        } else {
            let mut bytes = Vec::new();
            f(&mut bytes);
            self.queue.push_back(Waiting::Bytes(bytes));
        }
    }

    /// A reply made from the results of `answer` by `encode`.
    pub fn answer(
        &mut self,
        answer: Answer,
        encode: impl FnOnce(Vec<OpResult>, &mut Vec<u8>) + 'static,
    ) {
        match answer {
            Answer::Ready(results) => self.emit(|o| encode(results, o)),
            Answer::Wait(rx) => self.queue.push_back(Waiting::Results(rx, Box::new(encode))),
        }
    }

    /// A reply computed by a task of its own (it may wait on other workers or the agent).
    pub fn later(&mut self, work: impl Future<Output = Vec<u8>> + 'static) {
        let (tx, rx) = oneshot::channel();
        spawn_local(async move {
            let _ = tx.send(work.await);
        });
        self.queue.push_back(Waiting::Later(rx));
    }

    // ---- lists (helper B) ----
    /// A reply that may wait for a long time (a blocked pop): as [`later`](Self::later),
    /// and the connection watches its socket meanwhile, dropping the work if it closes.
    pub fn later_blocking(&mut self, work: impl Future<Output = Vec<u8>> + 'static) {
        self.blocked.set(true);
        let (mut tx, rx) = oneshot::channel();
        spawn_local(async move {
            // A connection that went away no longer waits: the work is dropped.
            let out = tokio::select! {
                out = work => Some(out),
                _ = tx.closed() => None,
            };
            if let Some(out) = out {
                let _ = tx.send(out);
            }
        });
        self.queue.push_back(Waiting::Later(rx));
    }

    /// Waits for every queued reply, in order, into `out`.
    pub async fn settle(&mut self, dropped: impl Fn(&mut Vec<u8>)) {
        while let Some(w) = self.queue.pop_front() {
            self.starts.push(self.out.len());
            match w {
                Waiting::Bytes(b) => self.out.extend_from_slice(&b),
                Waiting::Results(rx, encode) => match rx.await {
                    Ok(results) => encode(results, &mut self.out),
                    Err(_) => dropped(&mut self.out),
                },
                Waiting::Later(rx) => match rx.await {
                    Ok(bytes) => self.out.extend_from_slice(&bytes),
                    Err(_) => dropped(&mut self.out),
                },
            }
        }
    }
}

/// What [`Codec::next`] did with the buffer.
pub enum Step {
    /// No complete request in the buffer.
    Need,
    /// Ran one request (and consumed its bytes).
    Ran,
    /// Ran one informational request (status, topology, ping…): not timed in the
    /// latency statistics, which are the latency of the clients' data requests. A monitor
    /// polls every node twice a second, and a status reply waits for every worker's
    /// statistics: at a low load those few slow requests made up most of the mean, so an
    /// idle cluster looked slow to the policy and it never removed a node.
    RanUntimed,
    /// A protocol error: its reply is queued; close the connection after writing.
    Close,
}

/// A client protocol: how requests are taken from a connection's bytes and run.
pub trait Codec {
    /// Takes the next complete request from the front of `buf`, runs it on `w` and queues
    /// its reply in `replies`.
    fn next(&mut self, w: &Rc<Worker>, buf: &mut BytesMut, replies: &mut Replies) -> Step;

    /// The requests of a batch, whose bytes arrived at `at`, have run (before their
    /// replies are awaited): a place for per-connection bookkeeping that need not happen
    /// per request. Nothing by default.
    fn batch_ran(&mut self, _at: Instant) {}

    /// The reply to a connection over the node's connection limit.
    fn too_many(&self) -> Vec<u8>;

    /// Serves the connection (in a slot kept for administrators) only once it
    /// authenticates as a user with the admin permission; anything else before is answered
    /// with [`too_many`](Self::too_many) and closes it. False if that cannot happen (a node
    /// without users): the connection is then refused at once.
    fn admins_only(&mut self) -> bool;

    /// The reply when a request was dropped (its worker stopped).
    fn dropped(out: &mut Vec<u8>);

    /// The command of the request [`next`](Self::next) just ran, for the request counts
    /// (`None`: not counted).
    fn last_command(&self) -> Option<Command> {
        None
    }

    /// Keys the request [`next`](Self::next) just ran reads or writes (a batch counts each
    /// of its keys; 1 by default): the weight of a request for
    /// `LATTICEKV_FAULT=slow-request-us`.
    fn last_keys(&self) -> u32 {
        1
    }

    /// True if the reply that starts `reply` is an error.
    fn is_error(_reply: &[u8]) -> bool {
        false
    }

    /// True once the client asked to close (after the replies are written).
    fn quit(&self) -> bool {
        false
    }

    /// Waits for something to push to an idle connection (subscriptions); never, by
    /// default.
    fn next_push(&mut self) -> impl Future<Output = Vec<u8>> {
        std::future::pending()
    }

    /// Appends the pushes waiting now, behind the batch's replies.
    fn drain_pushes(&mut self, _out: &mut Vec<u8>) {}

    /// True if the connection waits for pushes (subscriptions): the idle timeout does not
    /// apply to it.
    fn waits_for_pushes(&self) -> bool {
        false
    }

    /// Completes when the connection must close at once, even in the middle of a write
    /// (a pub/sub subscriber over its output limit); never, by default.
    fn killed(&self) -> impl Future<Output = ()> {
        std::future::pending()
    }

    /// Completes when another connection kills this one (`CLIENT KILL`); never, by default.
    /// Owned: the connection creates it once and keeps it for its life, so waiting for a
    /// kill costs no registration per request.
    fn kill_signal(&self) -> impl Future<Output = ()> + 'static {
        std::future::pending()
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// Writes `bytes` and flushes them (a TLS stream holds written bytes until flushed).
async fn write_out(stream: &mut Stream, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// Writes `bytes` unless the connection must close first ([`Codec::killed`], waited for
/// only by a write that does not complete at once: most do, and setting up the wait cost
/// as much as a small request's own work). False if it failed or was cut short.
async fn write_unless_killed<C: Codec>(stream: &mut Stream, bytes: &[u8], codec: &C) -> bool {
    let write = write_out(stream, bytes);
    tokio::pin!(write);
    if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await {
        return r.is_ok();
    }
    tokio::select! {
        biased;
        r = &mut write => r.is_ok(),
        _ = codec.killed() => false,
    }
}

/// Completes when the node stops or the connection is killed (`kill`). The two are watched
/// by a task of their own that signals the connection through a oneshot, which a poll
/// checks without a lock: the connection polls it every time it waits for bytes, i.e. once
/// per request of a client that waits for each reply, and polling the two waiters
/// themselves (a watch and a `Notify`, each behind a mutex) cost more than the request's
/// own work in the store. The task ends with the connection (the receiver dropped).
fn stop_signal(w: &Worker, kill: impl Future<Output = ()> + 'static) -> oneshot::Receiver<()> {
    let (mut tx, rx) = oneshot::channel();
    let mut shutdown = w.shared.shutdown();
    spawn_local(async move {
        tokio::select! {
            biased;
            _ = tx.closed() => {}
            _ = shutdown.wait_for(|s| *s) => { let _ = tx.send(()); }
            () = kill => { let _ = tx.send(()); }
        }
    });
    rx
}

/// What [`run_batch`] did.
#[derive(Clone, Copy, Debug)]
pub struct Batch {
    /// Requests run.
    pub requests: usize,
    /// Of those, the ones whose latency counts (all but [`Step::RanUntimed`]).
    pub timed: usize,
    /// Keys the timed requests read or wrote (see [`Codec::last_keys`]).
    pub timed_keys: u32,
    /// A protocol error: close the connection once the replies are written.
    pub close: bool,
    /// Stopped at [`MAX_PIPELINE`] requests or `max_batch_reply` bytes of replies: complete
    /// requests may remain in the buffer.
    pub full: bool,
}

/// Runs the complete requests at the front of `inbuf` (at most [`MAX_PIPELINE`], and none
/// once the replies reach `max_batch_reply` bytes), waits for their replies and appends
/// them to `replies.out` in request order, followed by the pushes waiting (a Subscribe's
/// answer comes before its first push).
pub async fn run_batch<C: Codec>(
    w: &Rc<Worker>,
    codec: &mut C,
    inbuf: &mut BytesMut,
    replies: &mut Replies,
    max_batch_reply: usize,
    read_at: Instant,
) -> Batch {
    let mut batch = Batch {
        requests: 0,
        timed: 0,
        timed_keys: 0,
        close: false,
        full: false,
    };
    // Nothing below yields until `end_batch`: the requests share one clock reading.
    w.begin_batch();
    while !codec.quit() {
        if batch.requests >= MAX_PIPELINE || replies.out.len() >= max_batch_reply {
            batch.full = true;
            break;
        }
        let mark = (replies.queue.len(), replies.out.len());
        let step = codec.next(w, inbuf, replies);
        if let (Step::Ran | Step::RanUntimed, Some(c)) = (&step, codec.last_command()) {
            replies.marks.push((c, mark.0, mark.1));
        }
        match step {
            Step::Need => break,
            Step::Ran => {
                batch.requests += 1;
                batch.timed += 1;
                batch.timed_keys = batch.timed_keys.saturating_add(codec.last_keys());
            }
            Step::RanUntimed => batch.requests += 1,
            Step::Close => {
                batch.close = true;
                break;
            }
        }
    }
    w.end_batch();
    codec.batch_ran(read_at);
    replies.settle(C::dropped).await;
    count_requests::<C>(w, replies);
    codec.drain_pushes(&mut replies.out);
    batch
}

/// Counts the settled batch's requests on `w`, each an error if its reply is one (a request
/// that wrote no reply is not; one that wrote several is judged by its first).
fn count_requests<C: Codec>(w: &Worker, replies: &mut Replies) {
    for &(command, queued, at) in &replies.marks {
        let start = if queued == 0 {
            Some(at)
        } else {
            replies.starts.get(queued).copied()
        };
        let error = start
            .and_then(|s| replies.out.get(s..))
            .is_some_and(C::is_error);
        w.count_request(command, error);
    }
    replies.marks.clear();
    replies.starts.clear();
}

/// Serves one connection with `codec` until the client closes it, quits or breaks the
/// protocol, or the node stops.
pub async fn serve<C: Codec>(
    w: Rc<Worker>,
    mut stream: Stream,
    permit: Option<ConnectionPermit>,
    mut codec: C,
) {
    let _alive = LocalConnection::new(&w.conns);
    let _ = stream.set_nodelay(true);
    let refused = match &permit {
        None => true,
        Some(p) => p.admin_only && !codec.admins_only(),
    };
    if refused {
        let _ = write_out(&mut stream, &codec.too_many()).await;
        return;
    }
    let mut inbuf = BytesMut::with_capacity(16 * 1024);
    let mut replies = Replies {
        out: Vec::with_capacity(16 * 1024),
        queue: VecDeque::new(),
        blocked: Default::default(),
        marks: Vec::new(),
        starts: Vec::new(),
    };
    let blocked = replies.blocked.clone();
    let mut stop = stop_signal(&w, codec.kill_signal());
    let limits = &w.shared.config.limits;
    let max_batch_reply = limits.max_reply_bytes.max(1);
    let mut clock = ReadClock::new(
        limits.idle_timeout(),
        limits.partial_request_timeout(),
        Instant::now(),
    );
    // False when the buffer may still hold complete requests (the pipeline bound stopped
    // the last round early): run those before waiting for more bytes.
    let mut need_read = true;
    let mut read_at = Instant::now();
    loop {
        if need_read {
            // Read in large chunks: BytesMut only grows by 64 bytes when full.
            if inbuf.capacity() - inbuf.len() < 4096 {
                inbuf.reserve(16 * 1024);
            }
            let deadline = clock.deadline(codec.waits_for_pushes());
            // Biased, the read first: a request that arrived completes the select at its
            // first branch, without polling (or registering) the others.
            let read = tokio::select! {
                biased;
                r = stream.read_buf(&mut inbuf) => Some(r),
                push = codec.next_push() => {
                    replies.out.extend_from_slice(&push);
                    None
                }
                _ = until(deadline) => {
                    tracing::debug!(
                        pending = inbuf.len(),
                        "closing a connection: partial-request or idle timeout"
                    );
                    return;
                }
                _ = &mut stop => return,
            };
            match read {
                Some(Ok(0) | Err(_)) => return,
                Some(Ok(_)) => read_at = Instant::now(),
                None => {
                    clock.pushed(Instant::now());
                    codec.drain_pushes(&mut replies.out);
                    let wrote = write_unless_killed(&mut stream, &replies.out, &codec).await;
                    if !wrote || codec.quit() {
                        return;
                    }
                    replies.out.clear();
                    continue;
                }
            }
        }
        // Writers wait while the log is far behind rather than queue without bound.
        w.journal.wait_room().await;
        // And while RAM is full of records the disk tier has not acknowledged yet.
        w.wait_memory_room().await;
        // ---- lists (helper B) ----
        // While a blocked pop waits, bytes the client sends are kept for the next batch,
        // and a close ends the connection (dropping the waiter).
        let (batch, early) = {
            let run = run_batch(
                &w,
                &mut codec,
                &mut inbuf,
                &mut replies,
                max_batch_reply,
                read_at,
            );
            tokio::pin!(run);
            let mut early = BytesMut::new();
            // The first poll runs the batch's commands (a blocked pop raises `blocked`).
            let first = std::future::poll_fn(|cx| Poll::Ready(run.as_mut().poll(cx))).await;
            loop {
                if let Poll::Ready(batch) = first {
                    break (batch, early);
                }
                tokio::select! {
                    biased;
                    batch = &mut run => break (batch, early),
                    r = stream.read_buf(&mut early), if blocked.get() && early.len() < 64 * 1024 => {
                        if matches!(r, Ok(0) | Err(_)) {
                            return;
                        }
                    }
                }
            }
        };
        blocked.set(false);
        let early_bytes = !early.is_empty();
        inbuf.extend_from_slice(&early);
        if let (Some(per_key), true) = (w.shared.faults.slow_request, batch.timed > 0) {
            // Testing only (`LATTICEKV_FAULT=slow-request-us=N`): a worker of known capacity,
            // N µs per key, so a batch split over more workers costs no more in all.
            std::thread::sleep(per_key.saturating_mul(batch.timed_keys));
        }
        if batch.timed > 0 {
            // Every request of the batch arrived by the last read, and every reply is
            // ready now: one clock reading per batch, not per request.
            w.record_latency(read_at.elapsed(), batch.timed);
        }
        if !replies.out.is_empty() {
            let wrote = write_unless_killed(&mut stream, &replies.out, &codec).await;
            if !wrote {
                return;
            }
        }
        if batch.close || codec.quit() {
            return;
        }
        need_read = !batch.full && !early_bytes;
        if need_read {
            clock.read(read_at, batch.requests > 0, !inbuf.is_empty());
        }
        replies.out.clear();
        // Don't let one large request pin a large buffer for the connection's lifetime.
        if inbuf.capacity() > 1024 * 1024 && inbuf.is_empty() {
            inbuf = BytesMut::with_capacity(16 * 1024);
        }
        if replies.out.capacity() > 1024 * 1024 {
            replies.out = Vec::with_capacity(16 * 1024);
        }
    }
}
