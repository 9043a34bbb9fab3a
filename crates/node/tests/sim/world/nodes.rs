//! The simulated nodes and their workers: creating, starting and driving replica cores,
//! recording what they did, carrying out their effects.

use super::*;

impl World {
    // ---- nodes and workers ----------------------------------------------------------------

    /// "node/worker".
    pub fn name(&self, r: Replica) -> String {
        match self.nodes.get(&r.node) {
            Some(n) => format!("{}/{}", n.id, r.worker),
            None => format!("{:x}/{}", r.node, r.worker),
        }
    }

    /// Creates (or re-creates, for a restart) a node's entry, without workers.
    pub(super) fn add_node(&mut self, id: &str) -> NodeKey {
        let nk = node_key(id);
        let workers = match self.worker_counts.get(id) {
            Some(&w) => w,
            None => {
                let w = self.rng.usize(1..=3);
                self.worker_counts.insert(id.to_string(), w);
                w
            }
        };
        // One node in four places whole keys (an older version, or `hash_tags = false`):
        // while it is in the rings the cluster does too. Fixed per node, like its worker
        // count: the agents here learn members, not changed descriptions, so a restart
        // does not change what the rings are built from.
        let placement = match self.placements.get(id) {
            Some(&p) => p,
            None => {
                let p = if self.rng.usize(0..4) == 0 {
                    placement::PLACEMENT_WHOLE_KEY
                } else {
                    placement::PLACEMENT_HASH_TAGS
                };
                self.placements.insert(id.to_string(), p);
                p
            }
        };
        let info = NodeInfo {
            id: id.to_string(),
            tier: Tier::Memory,
            workers: (0..workers).map(|w| format!("{id}/{w}")).collect(),
            front: format!("{id}/front"),
            resp: format!("{id}/resp"),
            peer: format!("{id}/peer"),
            vnodes: 16,
            placement,
        };
        self.next_inc += 1;
        let clock = Arc::new(ManualClock::new(EPOCH_MS + self.now));
        clock.set_skew(self.rng.i64(-self.p.max_skew_ms..=self.p.max_skew_ms));
        let view = Arc::new(ViewState::of(
            vec![info.clone()],
            ReplicationTable::new(),
            self.default_vector(),
        ));
        self.nodes.insert(
            nk,
            NodeSim {
                id: id.to_string(),
                info,
                status: Status::Up,
                inc: self.next_inc,
                clock,
                synced: false,
                belief: BTreeSet::from([nk]),
                table_version: 0,
                view,
                workers: Vec::new(),
                leave_deadline: 0,
                leave: None,
            },
        );
        nk
    }

    pub(super) fn default_vector(&self) -> ReplicationVector {
        default_vector(self.p.global_rf, self.p.local_rf)
    }

    /// Builds the view of `members` with the current replication table; the nodes that are
    /// neither members nor gone for good (declared dead, or cut off) count as dead.
    pub(super) fn build_view(&self, members: &BTreeSet<NodeKey>, version: u64) -> ViewState {
        let infos: Vec<NodeInfo> = members.iter().map(|m| self.nodes[m].info.clone()).collect();
        let table: ReplicationTable = self
            .truth
            .table
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let mut view = ViewState::of(infos, table, self.default_vector());
        view.version = version;
        view.dead = self
            .nodes
            .keys()
            .filter(|k| !members.contains(k) && !self.truth.left.contains(k))
            .count();
        view
    }

    /// Starts a node's workers with the view of `belief` (the whole cluster for the initial
    /// nodes; itself alone for a node that joins, as a starting agent knows only itself).
    pub(super) fn start_node(&mut self, nk: NodeKey, belief: BTreeSet<NodeKey>, initial: bool) {
        let view = Arc::new(if initial {
            self.build_view(&belief, 0)
        } else {
            self.build_view(&BTreeSet::from([nk]), 0)
        });
        let workers = self.nodes[&nk].info.workers.len();
        let clock = self.nodes[&nk].clock.clone();
        clock.set(EPOCH_MS + self.now);
        let mut cores = Vec::with_capacity(workers);
        for w in 0..workers {
            let config = ShardConfig {
                me: Replica {
                    node: nk,
                    worker: w as u32,
                },
                limits: Limits::default(),
                memory_budget: 1 << 30,
                max_changeset_keys: self.p.max_changeset_keys,
                settle_ms: 1_000,
                tombstone_memory_ms: self.p.tombstone_grace_ms,
                disk_copy: Default::default(),
            };
            let mut shard = Shard::new(config, view.clone(), self.rng.u64(..), clock.clone());
            shard.audit();
            if self.p.mode == Mode::DropAfterFirstAck {
                shard.break_handoff();
            }
            let core_config = CoreConfig {
                gossip_period_ms: self.p.gossip_ms,
                anti_entropy_period_ms: self.p.anti_entropy_ms,
                anti_entropy_after_view_ms: 500,
                anti_entropy_bytes_per_sec: 32 << 20,
                peer_timeout_ms: self.p.timeout_ms,
                max_batches_in_flight: 64,
                max_bytes_in_flight: 16 << 20,
                backlog_pause_ms: 2,
                journal_flush_ms: 2,
                default_ack: Ack::MERGED,
                tombstone_grace_ms: self.p.tombstone_grace_ms,
                max_reply_bytes: 64 << 20,
                // The node's default statistics period: the core ticks at each close, as a
                // real node's does (the checks do not look at the statistics themselves).
                stats: node::stats::StatsConfig::default(),
            };
            let core_config = if self.p.mode == Mode::NoRetryNoAntiEntropy {
                CoreConfig {
                    anti_entropy_period_ms: u64::MAX / 4,
                    anti_entropy_after_view_ms: u64::MAX / 4,
                    ..core_config
                }
            } else {
                core_config
            };
            cores.push(WorkerSim {
                core: Core::new(shard, core_config, self.rng.u64(..)),
                tick_at: None,
            });
        }
        let node = self.nodes.get_mut(&nk).expect("node entry");
        node.status = Status::Up;
        node.synced = initial;
        node.belief = if initial {
            belief
        } else {
            BTreeSet::from([nk])
        };
        node.table_version = if initial { self.truth.table_version } else { 0 };
        node.view = view;
        node.workers = cores;
        let inc = node.inc;
        let agent = self.rng.u64(1..=self.p.agent_ms);
        self.schedule(agent, Event::AgentTick(nk, inc));
        for w in 0..workers {
            let r = Replica {
                node: nk,
                worker: w as u32,
            };
            self.with_core(r, Some(inc), |_| ());
        }
    }

    pub(super) fn live(&self, nk: NodeKey) -> bool {
        self.nodes
            .get(&nk)
            .is_some_and(|n| n.status != Status::Down)
    }

    /// Worker `r` if its node is live (and is incarnation `inc`, if given).
    pub(super) fn worker(&mut self, r: Replica, inc: u64) -> Option<&mut WorkerSim> {
        let node = self.nodes.get_mut(&r.node)?;
        if node.status == Status::Down || node.inc != inc {
            return None;
        }
        node.workers.get_mut(r.worker as usize)
    }

    /// Calls worker `r`'s core (of node incarnation `inc`, if given) on the node's clock,
    /// then carries out its effects and schedules its next tick.
    pub(super) fn with_core<R>(
        &mut self,
        r: Replica,
        inc: Option<u64>,
        f: impl FnOnce(&mut Core) -> R,
    ) -> Option<R> {
        let now = self.now;
        let node = self.nodes.get_mut(&r.node)?;
        if node.status == Status::Down || inc.is_some_and(|i| i != node.inc) {
            return None;
        }
        let node_inc = node.inc;
        node.clock.set(EPOCH_MS + now);
        let w = node.workers.get_mut(r.worker as usize)?;
        let out = f(&mut w.core);
        self.after_core(r, node_inc);
        Some(out)
    }

    /// After a call to worker `r`'s core: records what its shard did, schedules its next
    /// tick, carries out its effects.
    fn after_core(&mut self, r: Replica, node_inc: u64) {
        let now = self.now;
        let w = &mut self.nodes.get_mut(&r.node).expect("node").workers[r.worker as usize];
        let effects = w.core.take_effects();
        let audit = w.core.shard_mut().take_audit();
        let deadline = w.core.next_deadline().saturating_sub(EPOCH_MS).max(now);
        let reschedule = w.tick_at.is_none_or(|t| deadline < t);
        if reschedule {
            w.tick_at = Some(deadline);
        }
        if reschedule {
            self.schedule_at(deadline, Event::Tick(r, node_inc));
        }
        self.record(r, audit);
        // A send that fails on the spot (no address for its node, another worker's full
        // inbox) fails inside the worker's loop over its effects, as in `Worker::send`: the
        // core hears of it before the worker takes its next effects.
        let failed: Vec<(ReqId, PeerFailure)> = effects
            .into_iter()
            .filter_map(|e| self.effect(r, node_inc, e))
            .collect();
        if failed.is_empty() {
            return;
        }
        // Still live: nothing above stops a node.
        let w = &mut self.nodes.get_mut(&r.node).expect("node").workers[r.worker as usize];
        for (req, why) in failed {
            w.core.on_reply(req, Err(why));
        }
        self.after_core(r, node_inc);
    }

    /// Records what a worker's shard did.
    pub(super) fn record(&mut self, at: Replica, audit: Vec<Audit>) {
        let name = self.name(at);
        for a in audit {
            match a {
                Audit::Write {
                    key,
                    op,
                    before,
                    after,
                    actor,
                    replica,
                    result,
                } => {
                    if !wrote(&op, &result) {
                        continue;
                    }
                    let Some(post) = after else {
                        self.trace.notable(
                            self.now,
                            format!("{} at {name} left no record", show_op(&op)),
                        );
                        continue;
                    };
                    let (delta, effect) = match derive(&op, before.as_ref(), &post, actor) {
                        Ok(d) => d,
                        Err(e) => {
                            self.trace
                                .notable(self.now, format!("{} at {name}: {e}", show_op(&op)));
                            continue;
                        }
                    };
                    let id = self.writes.len();
                    let now = self.now;
                    self.trace.event(now, || {
                        format!(
                            "write #{id} {} at {name}{} epoch {:?}",
                            show_op(&op),
                            if replica { "" } else { " (not a replica)" },
                            delta.epoch
                        )
                    });
                    self.report.writes += 1;
                    self.report.misplaced_writes += u64::from(!replica);
                    self.writes.push(WriteRec {
                        id,
                        key,
                        at: name.clone(),
                        time: now,
                        op,
                        delta,
                        effect,
                        lost: None,
                        kept: None,
                    });
                }
                Audit::Dropped { key, record } => {
                    self.check_drop(at, &key, &record);
                    let now = self.now;
                    self.trace.event(now, || {
                        format!(
                            "{name} drops {} (handed off)",
                            String::from_utf8_lossy(&key)
                        )
                    });
                }
                Audit::Reclaimed { key, epoch } => {
                    let now = self.now;
                    self.trace.event(now, || {
                        format!(
                            "{name} reclaims {} at {epoch:?}",
                            String::from_utf8_lossy(&key)
                        )
                    });
                    self.report.reclaimed += 1;
                    self.reclaims.push(ReclaimRec {
                        key,
                        epoch,
                        time: now,
                    });
                }
            }
        }
    }

    /// A worker drops a key it handed off: every replica of the key under its view must
    /// have acknowledged a record covering the one dropped (observed on the network).
    pub(super) fn check_drop(&mut self, at: Replica, key: &Bytes, record: &lattice::Record) {
        let view = self.nodes[&at.node].workers[at.worker as usize]
            .core
            .shard()
            .view()
            .clone();
        let acks = self.handoff_acks.get(&(at, key.clone()));
        for r in view.replicas(key) {
            if r == at {
                continue;
            }
            let acked = acks.is_some_and(|a| {
                a.iter()
                    .any(|(who, rec)| *who == r && super::super::client::covers(rec, record))
            });
            if !acked {
                self.violations.push(format!(
                    "{} dropped {} before replica {} acknowledged it",
                    self.name(at),
                    String::from_utf8_lossy(key),
                    self.name(r)
                ));
            }
        }
    }

    /// Carries out one effect of worker `r`; a request that fails on the spot is returned
    /// with its failure.
    pub(super) fn effect(
        &mut self,
        r: Replica,
        inc: u64,
        e: Effect,
    ) -> Option<(ReqId, PeerFailure)> {
        match e {
            Effect::Send { req, to, peer, msg } => {
                if to.node != r.node {
                    // Another node is reached at the peer address the core gives (the one
                    // its view has for the node), as the real worker connects: with none, or
                    // another node's, the request cannot reach `to`.
                    let known = self.nodes.get(&to.node).map(|n| n.info.peer.as_str());
                    if peer.is_none() || peer.as_deref() != known {
                        self.report.unaddressed += 1;
                        let why = match &peer {
                            None => "no peer address for the node".to_string(),
                            Some(a) => format!("{a} is not the peer address of the node"),
                        };
                        let (f, t, kind) = (self.name(r), self.name(to), msg.name());
                        self.trace
                            .event(self.now, || format!("{kind} {f} -> {t} not sent: {why}"));
                        return Some((req, PeerFailure::Unreachable(why)));
                    }
                }
                if let PeerMsg::Replicate {
                    entries,
                    durable: true,
                } = &msg
                {
                    self.handoffs.insert((r, req.0), (to, entries.clone()));
                }
                self.send(r, inc, to, Message::Request { req, msg })
            }
            Effect::Respond { token, result } => {
                let asked = self.asked.remove(&token.0)?;
                let result = result.map_err(PeerFailure::Refused);
                let reply = Message::Reply {
                    req: asked.req,
                    result,
                };
                self.send_to(r, inc, asked.asker, asked.asker_inc, reply)
            }
            Effect::Complete { ticket, results } => {
                self.client_complete(r, inc, ticket.0, results);
                None
            }
            Effect::Journal(_) | Effect::Unreachable { .. } => None,
            // The simulated nodes have no backing store.
            Effect::BackingApply { .. } | Effect::BackingFetch { .. } => None,
            Effect::Sync { id, strict } => {
                let delay = self.rng.u64(0..=1);
                self.schedule(delay, Event::Synced(r, inc, id, strict));
                None
            }
        }
    }
}
