//! Carrying out what a worker's core asks: messages, answers, finished client requests,
//! log appends, disk syncs, the backing store.

use std::rc::Rc;
use std::time::Duration;

use tokio::task::spawn_local;

use super::worker::{Responder, Worker, WorkerMsg, SPILL_MARKER};
use crate::core::{Effect, PeerFailure};
use crate::peer::convert::response_to_pb;

impl Worker {
    /// Carries out the core's effects until it has none left, then what follows from its
    /// state: connections waiting for memory woken, the spill marker written, the timer
    /// moved earlier.
    pub(super) fn run_effects(self: &Rc<Self>) {
        loop {
            // Keyspace events first: they reach subscribers before the replies go out.
            let events = self.core.borrow_mut().shard_mut().take_key_events();
            if let (false, Some(sink)) = (events.is_empty(), self.key_event_sink.get()) {
                sink(self, events);
            }
            let effects = {
                let mut core = self.core.borrow_mut();
                if !core.has_effects() {
                    break;
                }
                core.take_effects()
            };
            for e in effects {
                self.execute(e);
            }
        }
        let (deadline, pressure, spilled) = {
            let core = self.core.borrow();
            let shard = core.shard();
            (
                core.next_deadline(),
                shard.memory_pressure(),
                shard.spilled(),
            )
        };
        if self.memory_waiting.get() && !pressure {
            self.memory_waiting.set(false);
            self.memory_room.notify_waiters();
        }
        if spilled && !self.spill_marked.get() {
            self.spill_marked.set(true);
            self.mark_spilled();
        }
        if deadline < self.sleeping_until.get() {
            self.sleeping_until.set(deadline);
            self.wake.notify_one();
        }
    }

    fn execute(self: &Rc<Self>, e: Effect) {
        match e {
            Effect::Send { req, to, peer, msg } => self.send(req, to, peer, msg),
            Effect::Respond { token, result } => {
                let Some(responder) = self.tokens.borrow_mut().remove(&token.0) else {
                    return;
                };
                match responder {
                    Responder::Mesh { worker, req } => {
                        let result = result.map_err(PeerFailure::Refused);
                        // A full inbox loses the answer: the asker times out and retries.
                        let _ = self
                            .shared
                            .mesh
                            .try_send(worker, WorkerMsg::Reply { req, result });
                    }
                    Responder::Conn { tx, id, crash } => {
                        let acked = result.is_ok();
                        let _ = tx.try_send(response_to_pb(id, result));
                        if crash && acked {
                            // The answer is on its way; die as a `kill -9` would.
                            spawn_local(async {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                tracing::warn!("LATTICEKV_FAULT: aborting right after a hand-off acknowledgement");
                                std::process::abort();
                            });
                        }
                    }
                }
            }
            Effect::Complete { ticket, results } => {
                let tx = self.tickets.borrow_mut().remove(&ticket.0);
                // Every ticket is registered before the effects that can complete it run
                // (`Worker::answer`); one missing is a client left waiting forever.
                debug_assert!(tx.is_some(), "no one waits for the results of {ticket:?}");
                if let Some(tx) = tx {
                    let _ = tx.send(results);
                }
            }
            Effect::Journal(entries) => {
                if let Err(why) = self.journal.append(self, entries) {
                    self.core.borrow_mut().set_journal_failure(Some(why));
                }
                if let Some(buf) = self.journal.reuse_buffer() {
                    self.core.borrow_mut().reuse_journal_buffer(buf);
                }
            }
            Effect::Sync { id, strict } => {
                let sync = self.journal.sync(strict);
                let w = self.clone();
                spawn_local(async move {
                    let result = sync.await;
                    w.with_core(|c| c.on_synced(id, result));
                });
            }
            Effect::Unreachable { to } => {
                if let Some(conn) = self.peers.borrow_mut().remove(&to) {
                    conn.abandon();
                }
            }
            Effect::BackingApply { id, batch } => {
                let store = self.shared.backing.clone();
                let w = self.clone();
                spawn_local(async move {
                    let started = std::time::Instant::now();
                    let ping = batch.is_empty();
                    let result = match store {
                        Some(s) => s.apply(batch).await,
                        None => Err("the node has no backing store".into()),
                    };
                    if !ping {
                        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        w.backing_latency.borrow_mut().record(ns, 1);
                    }
                    w.with_core(|c| c.on_backing_applied(id, result));
                });
            }
            Effect::BackingFetch { id, keys } => {
                let store = self.shared.backing.clone();
                let w = self.clone();
                spawn_local(async move {
                    let result = match store {
                        Some(s) => s.fetch(keys).await,
                        None => Err("the node has no backing store".into()),
                    };
                    w.with_core(|c| c.on_backing_fetched(id, result));
                });
            }
        }
    }

    /// Writes the node's spill marker (once per process; a failure is logged: the cost is
    /// a restart that trusts its log for keys it evicted before).
    fn mark_spilled(&self) {
        if self.shared.config.tier.tier() != placement::Tier::Memory {
            return;
        }
        let Some(dir) = &self.shared.config.data_dir else {
            return;
        };
        let path = dir.join(SPILL_MARKER);
        if path.exists() {
            return;
        }
        if let Err(e) = std::fs::write(&path, b"evicted keys: they live on the disk tier\n") {
            tracing::warn!(error = %e, path = %path.display(), "cannot write the spill marker");
        }
    }
}
