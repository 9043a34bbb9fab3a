//! Quiescence and the final checks: run until nothing is left to do and every pair of
//! workers agrees.

use super::*;

impl World {
    // ---- quiescence -----------------------------------------------------------------------

    /// After the active phase: runs until nothing is left to do and every pair of workers
    /// agrees (anti-entropy would repair nothing).
    pub(super) fn quiesce(&mut self) -> Result<(), String> {
        let start = self.now;
        loop {
            self.run_until(self.now + 50)?;
            let why = self
                .busy()
                .or_else(|| self.diverged())
                .or_else(|| self.tombstone_back());
            let Some(why) = why else {
                self.report.quiesce_ms = self.now - start;
                self.trace.notable(self.now, "quiescent".into());
                return Ok(());
            };
            if self.now > start + QUIESCE_LIMIT_MS {
                return Err(format!(
                    "not quiescent {QUIESCE_LIMIT_MS}ms after the active phase: {why}"
                ));
            }
        }
    }

    /// What is still going on, if anything: leaves, membership or views not settled,
    /// replication or hand-offs still owed.
    pub(super) fn busy(&mut self) -> Option<String> {
        for node in self.nodes.values() {
            match node.status {
                Status::Down => continue,
                Status::Leaving => return Some(format!("{} is still leaving", node.id)),
                Status::Up => {}
            }
            if node.belief != self.truth.members || node.table_version != self.truth.table_version {
                return Some(format!("{}'s membership is not up to date", node.id));
            }
            for (w, sh) in node.workers.iter().enumerate() {
                if sh.core.shard().view().version != node.view.version {
                    return Some(format!("{}/{w} has not switched views", node.id));
                }
                let stats = sh.core.stats();
                if stats.shard.pending_replication > 0 {
                    let view = sh.core.shard().view();
                    let handoffs: Vec<String> = sh
                        .core
                        .shard()
                        .pending_handoffs()
                        .iter()
                        .take(4)
                        .map(|(k, acked)| {
                            let name = |r: &Replica| match self.nodes.get(&r.node) {
                                Some(n) => format!("{}/{}", n.id, r.worker),
                                None => format!("{r:?}"),
                            };
                            format!(
                                "{} acked by [{}] of [{}]",
                                String::from_utf8_lossy(k),
                                acked.iter().map(name).collect::<Vec<_>>().join(" "),
                                view.replicas(k)
                                    .iter()
                                    .map(name)
                                    .collect::<Vec<_>>()
                                    .join(" ")
                            )
                        })
                        .collect();
                    return Some(format!(
                        "{}/{w} still owes replication ({stats:?}; hand-offs: {})",
                        node.id,
                        handoffs.join("; ")
                    ));
                }
            }
        }
        None
    }

    /// A reason anti-entropy would still repair something, if any: replicas of a key
    /// holding different records, or two workers whose digests differ. (Anti-entropy
    /// off: never.)
    /// A tombstone of a key whose every write was reclaimed, held again by a live worker:
    /// a replica that the reclamation's second phase did not reach handed it off as it
    /// left (seed 838: n0/1 lost its `TombstoneReclaim`, left, and its hand-off gave the
    /// tombstone to n4/0, a new replica that had never held it, whose anti-entropy spread
    /// it back to n2). It holds no value, and the key's primary reclaims it again in a
    /// later round; the run waits for that round instead of ending with it in place.
    fn tombstone_back(&mut self) -> Option<String> {
        let retired = super::super::check::retired_keys(self);
        for key in &retired {
            for node in self.nodes.values().filter(|n| n.status == Status::Up) {
                for (w, sh) in node.workers.iter().enumerate() {
                    if let Some(r) = sh.core.shard().store().get(key) {
                        let r = r.to_record();
                        if r.value.is_some() {
                            // A value is no returning tombstone: the final checks fail.
                            continue;
                        }
                        return Some(format!(
                            "{}/{w} holds a tombstone of {} again, every write of which was reclaimed",
                            node.id,
                            String::from_utf8_lossy(key)
                        ));
                    }
                }
            }
        }
        None
    }

    pub(super) fn diverged(&mut self) -> Option<String> {
        if self.p.mode == Mode::NoRetryNoAntiEntropy {
            return None;
        }
        if let Err(e) = super::super::check::replicas_agree(self) {
            return Some(e);
        }
        let workers: Vec<Replica> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.status == Status::Up)
            .flat_map(|(&node, n)| {
                (0..n.workers.len() as u32).map(move |worker| Replica { node, worker })
            })
            .collect();
        for (i, &a) in workers.iter().enumerate() {
            for &b in &workers[i + 1..] {
                let da = self.core(a).shard().digest(b);
                let db = self.core(b).shard().digest(a);
                if da != db {
                    return Some(format!(
                        "digests of {} and {} differ",
                        self.name(a),
                        self.name(b)
                    ));
                }
            }
        }
        None
    }

    /// The core of live worker `r`.
    pub fn core(&self, r: Replica) -> &Core {
        &self.nodes[&r.node].workers[r.worker as usize].core
    }

    /// Every copy of `keys` the cluster would still deliver (see `check`): in live workers'
    /// stores, and in messages between workers of a live node (the mesh is reliable).
    #[allow(clippy::type_complexity)]
    pub fn copies_of(
        &self,
        keys: &BTreeSet<Bytes>,
    ) -> BTreeMap<Bytes, Vec<(String, lattice::Record)>> {
        let mut out: BTreeMap<Bytes, Vec<(String, lattice::Record)>> = BTreeMap::new();
        for node in self.nodes.values().filter(|n| n.status != Status::Down) {
            for (w, sh) in node.workers.iter().enumerate() {
                for k in keys {
                    if let Some(r) = sh.core.shard().store().get(k) {
                        out.entry(k.clone())
                            .or_default()
                            .push((format!("the store of {}/{w}", node.id), r.to_record()));
                    }
                }
            }
        }
        for s in self.queue.iter() {
            let Event::Deliver(env) = &s.ev else { continue };
            let live = self
                .nodes
                .get(&env.to.node)
                .is_some_and(|n| n.status != Status::Down && n.inc == env.to_inc);
            if env.from.node != env.to.node || !live {
                continue;
            }
            if let Message::Request {
                msg: PeerMsg::Replicate { entries, .. },
                ..
            } = &env.message
            {
                for (k, r) in entries {
                    if keys.contains(k) {
                        out.entry(k.clone()).or_default().push((
                            format!(
                                "a message from {} to {}",
                                self.name(env.from),
                                self.name(env.to)
                            ),
                            r.clone(),
                        ));
                    }
                }
            }
        }
        out
    }
}
