//! A worker's thread: its single-threaded runtime and the tasks it runs until the node
//! stops — the inbox, the timer, the views, subscription rounds, the journal, and the
//! services the node starts on it.

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::{spawn_local, LocalSet};

use super::journal::{Journal, JournalSetup};
use super::shared::Shared;
use super::worker::{Responder, Worker, WorkerMsg};
use crate::core::Core;
use crate::subscribe::{Fingerprint, Watched};

/// How long a stopping worker waits for its connections to finish.
pub const EXIT_DEADLINE: Duration = Duration::from_secs(5);

/// Work to start on a worker when it starts (accept loops).
pub type Service = Box<dyn FnOnce(Rc<Worker>) + Send>;

/// What one worker thread is given at start.
pub struct WorkerSetup {
    /// Node-wide state.
    pub shared: Arc<Shared>,
    /// This worker's index.
    pub index: u32,
    /// Its core.
    pub core: Core,
    /// Its inbox.
    pub inbox: mpsc::Receiver<WorkerMsg>,
    /// What makes its writes durable.
    pub journal: JournalSetup,
    /// Services to start on it.
    pub services: Vec<Service>,
}

impl Worker {
    /// Handles messages from this node's other workers and work handed over.
    async fn inbox(self: Rc<Self>, mut inbox: mpsc::Receiver<WorkerMsg>) {
        while let Some(msg) = inbox.recv().await {
            match msg {
                WorkerMsg::Peer { from, msg, req } => {
                    self.journal.wait_room().await;
                    self.on_peer(
                        from,
                        msg,
                        Responder::Mesh {
                            worker: from.worker,
                            req,
                        },
                    );
                }
                WorkerMsg::Reply { req, result } => self.with_core(|c| c.on_reply(req, result)),
                WorkerMsg::Run(f) => f(&self),
            }
        }
    }

    /// Ticks the core at its deadline.
    pub(super) async fn timer(self: Rc<Self>) {
        let mut shutdown = self.shared.shutdown();
        let origin = Instant::now();
        let clock_origin = self.core.borrow().shard().clock().mono_ms();
        loop {
            let deadline = self.core.borrow().next_deadline();
            self.sleeping_until.set(deadline);
            let wait = Duration::from_millis(deadline.saturating_sub(clock_origin));
            tokio::select! {
                _ = tokio::time::sleep_until((origin + wait).into()) => {}
                _ = self.wake.notified() => continue,
                _ = shutdown.wait_for(|s| *s) => return,
            }
            self.sleeping_until.set(u64::MAX);
            self.with_core(Core::tick);
            // Let the connections' requests in before the next tick, even one due at once
            // (a view change compared step by step, a backlog of hand-offs): `yield_now`
            // resumes this task only after the runtime has polled its sockets. (A sleep
            // whose deadline has passed usually waits for that turn too, the timer wheel
            // firing only then, but not when the wheel is current.)
            tokio::task::yield_now().await;
        }
    }

    /// Switches the core to every new view the agent publishes.
    async fn views(self: Rc<Self>) {
        let mut snapshots = self.shared.snapshots.clone();
        let mut shutdown = self.shared.shutdown();
        loop {
            let view = snapshots.borrow_and_update().view.clone();
            self.with_core(|c| c.set_view(view));
            tokio::select! {
                r = snapshots.changed() => if r.is_err() { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }

    /// Runs a subscription round every [`crate::subscribe::TICK`] while connections of this
    /// worker subscribe to keys; sleeps until one does otherwise.
    async fn subscription_rounds(self: Rc<Self>) {
        let mut shutdown = self.shared.shutdown();
        loop {
            let idle = self.subscriptions.borrow().is_empty();
            if idle {
                tokio::select! {
                    _ = self.subscribed.notified() => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(crate::subscribe::TICK) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
            self.subscription_round();
        }
    }

    /// One subscription round: pushes the keys that are due and changed.
    fn subscription_round(&self) {
        let mut subs = self.subscriptions.borrow_mut();
        if subs.is_empty() {
            return;
        }
        let mut core = self.core.borrow_mut();
        let shard = core.shard_mut();
        // Nothing in the store changed since a value was found: it is the same, unread.
        let quiet = shard.quiet_mark();
        subs.round_with(Instant::now(), |key, seen| {
            if shard.route(key) != crate::shard::Route::Local {
                return (Watched::Moved, None);
            }
            if let Some(seen) = seen.filter(|s| quiet.is_some() && s.as_of == quiet) {
                return (Watched::Unchanged, Some(seen));
            }
            // An unchanged value is not copied and encoded again to find its version.
            let fingerprint = shard
                .watched_fingerprint(key)
                .map(|hash| Fingerprint { hash, as_of: quiet });
            if fingerprint.is_some() && fingerprint.map(|f| f.hash) == seen.map(|f| f.hash) {
                return (Watched::Unchanged, fingerprint);
            }
            // Right after a view change, a key moving here may read absent until its
            // hand-off arrives; that arrival is then pushed like any change.
            match shard.watched_value(key) {
                Ok(v) => (
                    Watched::Value(v.as_ref().map(wire::convert::value_to_pb)),
                    fingerprint,
                ),
                Err(_) => (Watched::Unknown, None),
            }
        });
    }

    /// A worker without a log whose only task is its inbox, spawned on the current
    /// `LocalSet`; whoever holds it ticks its core (the fuzz targets, `crate::fuzzing`,
    /// with a manual clock).
    pub(crate) fn in_memory(
        shared: Arc<Shared>,
        index: u32,
        core: Core,
        inbox: mpsc::Receiver<WorkerMsg>,
    ) -> Rc<Worker> {
        let w = Worker::new(shared, index, core, Journal::None);
        spawn_local(w.clone().inbox(inbox));
        w
    }
}

/// Spawns `fut` on the current worker's thread.
pub fn spawn_on_worker(fut: impl Future<Output = ()> + 'static) {
    spawn_local(fut);
}

/// Runs a worker until the node stops. Call on the worker's own thread.
pub fn run(setup: WorkerSetup) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = LocalSet::new();
    local.block_on(&rt, async move {
        let WorkerSetup {
            shared,
            index,
            core,
            inbox,
            journal,
            services,
        } = setup;
        let mut core = core;
        // Occupancy: the time this thread's runtime spent running tasks rather than
        // waiting for events (one runtime, one thread: its worker 0).
        let metrics = tokio::runtime::Handle::current().metrics();
        core.set_busy_meter(Box::new(move || {
            u64::try_from(metrics.worker_total_busy_duration(0).as_nanos()).unwrap_or(u64::MAX)
        }));
        let w = Worker::new(shared.clone(), index, core, journal.build());
        spawn_local(w.clone().inbox(inbox));
        spawn_local(w.clone().views());
        spawn_local(w.clone().timer());
        spawn_local(w.clone().subscription_rounds());
        spawn_local(super::journal::run(w.clone()));
        for service in services {
            service(w.clone());
        }

        let mut shutdown = shared.shutdown();
        let _ = shutdown.wait_for(|stop| *stop).await;
        // Connections see the same signal and finish their current batch.
        if tokio::time::timeout(EXIT_DEADLINE, w.conns.all_closed())
            .await
            .is_err()
        {
            tracing::warn!(
                worker = index,
                open = w.conns.open(),
                "connections still open at exit"
            );
        }
        // A last gossip round, and what is queued for the log.
        w.with_core(Core::flush);
        super::journal::close(&w).await;
        Ok(())
    })
}
