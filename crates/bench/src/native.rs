//! The native driver: a "smart client" sending each operation straight to the worker that
//! owns its key.
//!
//! A logical connection opens one TCP connection per worker it needs (lazily). Each round it
//! groups its operations by worker and writes them, then reads the responses of every worker
//! connection in turn (they come back in request order, and every id is checked). Reading
//! the worker connections one after the other means an operation's latency may include
//! waiting for another worker's responses of the same round: like the round itself, it ends
//! no earlier than the slowest worker's reply (with `--pipeline 1 --batch 1` a round has
//! one request, so this never applies).
//!
//! With `--batch 1` each operation is one request: `Get`, or `Update` (`assign`,
//! `counter_add` or `set_add`), timestamped by the worker. With `--batch B > 1` the round's
//! operations for a worker are packed into `GetMany` / `PutMany` requests of up to `B`
//! operations, and writes carry lattice values built here: an LWW value stamped by the
//! thread's [`lattice::Hlc`], a PN-counter entry with the thread's cumulative increments
//! for the key, or an OR-set delta adding the member with a fresh dot.
//!
//! With `--follow-topology`, an operation redirected, or whose worker is unreachable or
//! whose connection was lost, is sent again once the route is refreshed (`retry`); a round
//! ends when every operation got its answer or gave up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::frame::{frame_len, DEFAULT_MAX_FRAME, HEADER_LEN};

use crate::args::WriteType;
use crate::clock::{micros, physical_ms};
use crate::error::BenchError;
use crate::keys::member;
use crate::proto::{self, PutValue};
use crate::retry::{resendable_after_loss, Cause, Retry, MAX_ATTEMPTS, ROUTE_WAIT};
use crate::setup::{ClientLattice, ConnCtx, Route, Setup};
use crate::stats::Phase;
use crate::workload::{Action, OpKind, Slot};

/// One request written in this phase.
#[derive(Clone, Copy, Debug)]
struct Req {
    id: u64,
    /// Its first slot in `Sock::order`.
    first: usize,
    /// Number of operations (slots).
    n: usize,
    /// A `GetMany` / `PutMany` (answered with a `MultiResult`).
    multi: bool,
}

/// A TCP connection to one worker.
struct Sock {
    stream: TcpStream,
    addr: String,
    out: Vec<u8>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    reqs: Vec<Req>,
    /// Slot indices of the requests' operations, in request order.
    order: Vec<usize>,
    /// When this phase's requests were written.
    sent: Instant,
}

impl Sock {
    async fn connect(addr: &str) -> Result<Sock, BenchError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| BenchError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        Ok(Sock {
            stream,
            addr: addr.to_string(),
            out: Vec::with_capacity(16 * 1024),
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            reqs: Vec::new(),
            order: Vec::new(),
            sent: Instant::now(),
        })
    }

    fn failed(&self, reason: impl ToString) -> BenchError {
        BenchError::Connection {
            addr: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    fn protocol(&self, reason: impl ToString) -> BenchError {
        BenchError::Protocol {
            addr: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    async fn fill(&mut self) -> Result<(), BenchError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let len = self.buf.len() * 2;
                self.buf.resize(len, 0);
            }
        }
        match self.stream.read(&mut self.buf[self.end..]).await {
            Ok(0) => Err(self.failed("closed by the server")),
            Ok(n) => {
                self.end += n;
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Reads the responses to this phase's requests, accounting each to its slots. Returns
    /// whether any operation was redirected (the route is stale). With `retry`, a
    /// redirected operation is marked to be sent again instead of failing.
    async fn read_responses(
        &mut self,
        slots: &mut [Slot],
        first_error: &mut Option<String>,
        mut retry: Option<&mut Retry>,
    ) -> Result<bool, BenchError> {
        let mut redirected = false;
        let mut arrived = self.sent;
        for r in 0..self.reqs.len() {
            let req = self.reqs[r];
            let len = loop {
                match frame_len(&self.buf[self.start..self.end], DEFAULT_MAX_FRAME) {
                    Ok(Some(len)) => break len,
                    Ok(None) => {
                        self.fill().await?;
                        arrived = Instant::now();
                    }
                    Err(e) => return Err(self.protocol(e)),
                }
            };
            let latency = micros(arrived - self.sent);
            let body = &self.buf[self.start + HEADER_LEN..self.start + HEADER_LEN + len];
            let Some(scanned) = proto::scan_response(body) else {
                return Err(self.protocol("undecodable response"));
            };
            if scanned.id != req.id {
                let what = scanned.error.map(proto::error_text).unwrap_or_default();
                return Err(self.protocol(format!(
                    "response id {} to request {} {what}",
                    scanned.id, req.id
                )));
            }
            let order = &self.order[req.first..req.first + req.n];
            let mut account = |i: usize, error: Option<&[u8]>| {
                let redirect = error.is_some_and(proto::is_redirect);
                redirected |= redirect;
                let resend = redirect && retry.is_some();
                if let Some(&s) = order.get(i) {
                    if let Some(slot) = slots.get_mut(s) {
                        slot.latency_us += latency;
                        slot.error |= error.is_some() && !resend;
                    }
                    if let (true, Some(r)) = (resend, retry.as_deref_mut()) {
                        r.mark(s, arrived, Cause::Redirected);
                    }
                }
                if let Some(e) = error.filter(|_| !resend) {
                    if first_error.is_none() {
                        *first_error = Some(proto::error_text(e));
                    }
                }
            };
            match (req.multi, scanned.multi, scanned.error) {
                (true, Some(multi), _) => {
                    let mut i = 0;
                    let n = proto::key_results(multi, |e| {
                        account(i, e);
                        i += 1;
                    });
                    if n != Some(req.n) {
                        return Err(
                            self.protocol(format!("{n:?} results for a request of {} keys", req.n))
                        );
                    }
                }
                (true, None, None) => {
                    return Err(self.protocol("expected a MultiResult for a multi-key request"));
                }
                // A whole-request error, or a single-key request.
                (_, _, error) => {
                    for i in 0..req.n {
                        account(i, error);
                    }
                }
            }
            self.start += HEADER_LEN + len;
        }
        Ok(redirected)
    }

    /// Marks every operation of this phase's requests as failed (the connection was lost),
    /// with the time waited so far as its latency if it has none yet; with `retry`, those
    /// that may be sent twice are marked to be sent again instead (charged that wait).
    fn fail_all(
        &self,
        slots: &mut [Slot],
        mut retry: Option<(&mut Retry, &Setup, usize)>,
        cause: Cause,
    ) {
        let now = Instant::now();
        let waited = micros(now.saturating_duration_since(self.sent));
        for &i in &self.order {
            let Some(slot) = slots.get_mut(i) else {
                continue;
            };
            let resend = retry.as_ref().is_some_and(|(_, setup, phase)| {
                slot.kind
                    .action(*phase)
                    .is_some_and(|a| resendable_after_loss(a, setup.write_type, setup.batch))
            });
            match retry.as_mut() {
                Some((r, _, _)) if resend => {
                    slot.latency_us += waited;
                    r.mark(i, now, cause);
                }
                _ => {
                    slot.error = true;
                    if slot.latency_us == 0 {
                        slot.latency_us = waited;
                    }
                }
            }
        }
    }
}

/// Per worker, the slots of this phase to send in batches: reads and writes.
#[derive(Default)]
struct Group {
    reads: Vec<usize>,
    writes: Vec<usize>,
}

/// `--follow-topology`: how long a worker may take to answer a round's requests before
/// its connection is given up and the requests are sent again, on a new connection, with
/// a fresh route (the Rust client bounds a request the same way and abandons the
/// connection). A guard: a node receiving a leaving node's keys once left some reads
/// unanswered for good (fixed in the node since, docs/cluster.md "Leave"), and every
/// connection of the run waited on them until it ended. A node answering a round more
/// slowly than this (saturated) gets the round again, so it shows as resends.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// One logical connection: a socket per worker, opened on first use.
struct Conn {
    /// The route it uses, and that route's generation.
    route: Arc<Route>,
    generation: u64,
    socks: Vec<Option<Sock>>,
    groups: Vec<Group>,
    /// Worker of each slot of the round.
    worker_of: Vec<usize>,
    /// Workers that have requests this phase.
    active: Vec<usize>,
    /// Numbers of the lattice values of a `PutMany` (see [`ClientLattice::next_write`]).
    nums: Vec<(u64, u64)>,
    next_id: u64,
    /// The slots this attempt sends (all of the phase's at first, then those to resend).
    picked: Vec<bool>,
    /// Operations to send again (`--follow-topology`).
    retry: Retry,
}

impl Conn {
    fn new(generation: u64, route: Arc<Route>) -> Conn {
        let workers = route.workers();
        Conn {
            route,
            generation,
            socks: (0..workers).map(|_| None).collect(),
            groups: (0..workers).map(|_| Group::default()).collect(),
            worker_of: Vec::new(),
            active: Vec::new(),
            nums: Vec::new(),
            next_id: 1,
            picked: Vec::new(),
            retry: Retry::default(),
        }
    }

    /// Switches to a newer route: sockets to workers still in it are kept (under their new
    /// index), the others closed.
    fn adopt(&mut self, generation: u64, route: Arc<Route>) {
        let mut old: Vec<Sock> = self.socks.drain(..).flatten().collect();
        let workers = route.workers();
        self.socks = (0..workers)
            .map(|w| {
                let addr = route.addr(w);
                let i = old.iter().position(|s| s.addr == addr)?;
                Some(old.swap_remove(i))
            })
            .collect();
        self.groups = (0..workers).map(|_| Group::default()).collect();
        self.route = route;
        self.generation = generation;
    }

    /// Picks the operations of `phase` for its first attempt.
    fn pick_phase(&mut self, slots: &[Slot], phase: usize) {
        self.picked.clear();
        self.picked
            .extend(slots.iter().map(|s| s.kind.action(phase).is_some()));
        self.retry.reset(slots.len());
    }

    /// Computes the worker of every picked slot and opens the sockets the attempt needs.
    /// When following the topology, a worker that cannot be reached does not end the run:
    /// the picked operations are to be sent again (the route is marked stale); returns
    /// false then.
    async fn route(&mut self, setup: &Setup, slots: &[Slot]) -> Result<bool, BenchError> {
        let route = self.route.clone();
        self.worker_of.clear();
        for (i, slot) in slots.iter().enumerate() {
            if !self.picked[i] {
                self.worker_of.push(0);
                continue;
            }
            let w = route.worker(slot.key, setup.keys.get(slot.key));
            self.worker_of.push(w);
            if self.socks[w].is_none() {
                match Sock::connect(route.addr(w)).await {
                    Ok(sock) => self.socks[w] = Some(sock),
                    Err(_) if setup.follow => {
                        if let Some(routes) = &setup.route {
                            routes.mark_stale();
                        }
                        let now = Instant::now();
                        for (i, _) in self.picked.iter().enumerate().filter(|(_, p)| **p) {
                            self.retry.mark(i, now, Cause::Unreachable);
                        }
                        return Ok(false);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(true)
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Encodes this phase's requests into the sockets' buffers.
    fn encode(
        &mut self,
        setup: &Setup,
        ctx_lattice: &mut ClientLattice,
        slots: &[Slot],
        phase: usize,
    ) {
        self.active.clear();
        for sock in self.socks.iter_mut().flatten() {
            sock.out.clear();
            sock.reqs.clear();
            sock.order.clear();
        }
        let batch = setup.batch;
        for (i, slot) in slots.iter().enumerate() {
            let Some(action) = slot.kind.action(phase).filter(|_| self.picked[i]) else {
                continue;
            };
            let w = self.worker_of[i];
            if batch > 1 {
                let g = &mut self.groups[w];
                if g.reads.is_empty() && g.writes.is_empty() {
                    self.active.push(w);
                }
                match action {
                    Action::Read => g.reads.push(i),
                    Action::Write => g.writes.push(i),
                }
                continue;
            }
            let id = self.id();
            let Some(sock) = self.socks[w].as_mut() else {
                continue;
            };
            if sock.reqs.is_empty() {
                self.active.push(w);
            }
            let key = setup.keys.get(slot.key);
            match (action, setup.write_type) {
                (Action::Read, _) => proto::get(&mut sock.out, id, key),
                (Action::Write, WriteType::Lww) => {
                    let value = setup.values.get(usize::from(slot.variant));
                    proto::update_assign(&mut sock.out, id, key, value);
                }
                (Action::Write, WriteType::Counter) => {
                    proto::update_counter_add(&mut sock.out, id, key, 1)
                }
                (Action::Write, WriteType::Orset) => {
                    let m = member(usize::from(slot.variant));
                    proto::update_set_add(&mut sock.out, id, key, m);
                }
            }
            sock.reqs.push(Req {
                id,
                first: sock.order.len(),
                n: 1,
                multi: false,
            });
            sock.order.push(i);
        }
        if batch <= 1 {
            return;
        }
        let now_ms = physical_ms();
        for a in 0..self.active.len() {
            let w = self.active[a];
            let mut group = std::mem::take(&mut self.groups[w]);
            for chunk in group.reads.chunks(batch) {
                let id = self.id();
                let Some(sock) = self.socks[w].as_mut() else {
                    continue;
                };
                proto::get_many(&mut sock.out, id, chunk.len(), |j| {
                    setup.keys.get(slots[chunk[j]].key)
                });
                push_req(sock, id, chunk);
            }
            for chunk in group.writes.chunks(batch) {
                let id = self.id();
                self.nums.clear();
                for &s in chunk {
                    let nums = ctx_lattice.next_write(setup.write_type, slots[s].key, now_ms);
                    self.nums.push(nums);
                }
                let Some(sock) = self.socks[w].as_mut() else {
                    continue;
                };
                let nums = &self.nums;
                proto::put_many(&mut sock.out, id, chunk.len(), |j| {
                    let slot = &slots[chunk[j]];
                    let (a, b) = nums[j];
                    let value = match setup.write_type {
                        WriteType::Lww => PutValue::Lww {
                            time: a,
                            writer: b,
                            value: setup.values.get(usize::from(slot.variant)),
                        },
                        WriteType::Counter => PutValue::Counter {
                            actor: a,
                            increments: b,
                        },
                        WriteType::Orset => PutValue::OrSet {
                            member: member(usize::from(slot.variant)),
                            actor: a,
                            counter: b,
                        },
                    };
                    (setup.keys.get(slot.key), value)
                });
                push_req(sock, id, chunk);
            }
            group.reads.clear();
            group.writes.clear();
            self.groups[w] = group;
        }
    }

    /// Sends this phase's requests and reads all responses.
    async fn exec(
        &mut self,
        ctx: &ConnCtx,
        slots: &mut [Slot],
        phase: usize,
        first_error: &mut Option<String>,
    ) -> Result<(), BenchError> {
        {
            let mut lattice = ctx.lattice.borrow_mut();
            self.encode(&ctx.setup, &mut lattice, slots, phase);
        }
        let follow = ctx.setup.follow;
        let mut stale = false;
        for a in 0..self.active.len() {
            let w = self.active[a];
            let Some(sock) = self.socks[w].as_mut() else {
                continue;
            };
            sock.sent = Instant::now();
            if let Err(e) = sock.stream.write_all(&sock.out).await {
                if !follow {
                    return Err(sock.failed(e));
                }
                // Lost: its operations fail or are sent again, the socket is dropped
                // (reopened if the next route still names the worker).
                sock.fail_all(
                    slots,
                    Some((&mut self.retry, &ctx.setup, phase)),
                    Cause::Lost,
                );
                first_error.get_or_insert_with(|| sock.failed(e).to_string());
                self.socks[w] = None;
                stale = true;
            }
        }
        for a in 0..self.active.len() {
            let w = self.active[a];
            let Some(sock) = self.socks[w].as_mut() else {
                continue;
            };
            let (read, cause) = if follow {
                let retry = Some(&mut self.retry);
                let read = sock.read_responses(slots, first_error, retry);
                match tokio::time::timeout(ANSWER_TIMEOUT, read).await {
                    Ok(read) => (read, Cause::Lost),
                    Err(_) => (
                        Err(sock.failed(format!("no answer in {ANSWER_TIMEOUT:?}"))),
                        Cause::Silent,
                    ),
                }
            } else {
                (
                    sock.read_responses(slots, first_error, None).await,
                    Cause::Lost,
                )
            };
            match read {
                Ok(redirected) => stale |= redirected,
                Err(e) if follow => {
                    sock.fail_all(slots, Some((&mut self.retry, &ctx.setup, phase)), cause);
                    first_error.get_or_insert_with(|| e.to_string());
                    self.socks[w] = None;
                    stale = true;
                }
                Err(e) => return Err(e),
            }
        }
        if stale && follow {
            if let Some(routes) = &ctx.setup.route {
                routes.mark_stale();
            }
        }
        Ok(())
    }
}

fn push_req(sock: &mut Sock, id: u64, chunk: &[usize]) {
    sock.reqs.push(Req {
        id,
        first: sock.order.len(),
        n: chunk.len(),
        multi: true,
    });
    sock.order.extend_from_slice(chunk);
}

/// Runs one logical connection until its source is exhausted or the run stops.
pub(crate) async fn run(ctx: &mut ConnCtx) -> Result<(), BenchError> {
    let setup = ctx.setup.clone();
    let Some(routes) = &setup.route else {
        return Err(BenchError::Config("native run without a topology".into()));
    };
    let (generation, route) = routes.current();
    let mut conn = Conn::new(generation, route);
    let mut slots = Vec::new();
    let mut first_error = None;
    while ctx.next_round(&mut slots).await {
        let phases = if slots.iter().any(|s| s.kind == OpKind::Rmw) {
            2
        } else {
            1
        };
        for phase in 0..phases {
            conn.pick_phase(&slots, phase);
            let mut attempts = 0;
            loop {
                if routes.generation() != conn.generation {
                    let (generation, route) = routes.current();
                    conn.adopt(generation, route);
                }
                attempts += 1;
                if conn.route(&setup, &slots).await? {
                    conn.exec(ctx, &mut slots, phase, &mut first_error).await?;
                }
                if !conn.retry.any() {
                    break;
                }
                if attempts >= MAX_ATTEMPTS || ctx.control.phase() == Phase::Stop {
                    first_error.get_or_insert_with(|| {
                        format!("no answer after {attempts} attempts following the topology")
                    });
                    conn.retry.give_up(&mut slots, Instant::now());
                    break;
                }
                routes.newer_than(conn.generation, ROUTE_WAIT).await;
                conn.retry
                    .resend(&mut slots, Instant::now(), &mut conn.picked);
            }
        }
        let mut stats = ctx.stats.borrow_mut();
        ctx.control
            .count_resends(&mut stats, &conn.retry.take_counts());
        ctx.control
            .finish_round(&slots, &mut stats, &mut first_error);
    }
    Ok(())
}
