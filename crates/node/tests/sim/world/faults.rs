//! The agents (views published as the cluster changes) and the faults: partitions,
//! crashes, restarts, leaves.

use node::leave::{LeaveProgress, LeaveState};

use super::*;

impl World {
    // ---- agents ---------------------------------------------------------------------------

    /// The agent's periodic refresh: the members it can hear about, the replication table.
    pub(super) fn refresh_belief(&mut self, nk: NodeKey) {
        let node = &self.nodes[&nk];
        let mut members: BTreeSet<NodeKey> = self
            .truth
            .members
            .iter()
            .copied()
            .filter(|&m| m == nk || !self.suspects(nk, m))
            .collect();
        if node.status == Status::Leaving {
            members.remove(&nk);
        }
        if !node.synced {
            // A starting agent knows only itself until it reaches a member (if there is
            // anyone to reach).
            let others: Vec<NodeKey> = self
                .truth
                .members
                .iter()
                .copied()
                .filter(|&m| m != nk && self.live(m) && self.nodes[&m].synced)
                .collect();
            if !others.is_empty() && !others.iter().any(|&m| self.reachable(nk, m)) {
                return;
            }
        }
        let dead_changed = self.build_view(&members, 0).dead != node.view.dead;
        if members == node.belief && self.truth.table_version == node.table_version && !dead_changed
        {
            if !node.synced {
                self.nodes.get_mut(&nk).expect("node").synced = true;
            }
            return;
        }
        self.publish(nk, members);
    }

    pub(super) fn publish(&mut self, nk: NodeKey, members: BTreeSet<NodeKey>) {
        let version = self.nodes[&nk].view.version + 1;
        let view = Arc::new(self.build_view(&members, version));
        let names: Vec<&str> = members.iter().map(|m| self.nodes[m].id.as_str()).collect();
        let what = format!(
            "{} publishes view {version}: [{}] with {} explicit vectors{}",
            self.nodes[&nk].id,
            names.join(" "),
            self.truth.table.len(),
            if view.dead > 0 {
                format!(", {} dead", view.dead)
            } else {
                String::new()
            }
        );
        self.trace.notable(self.now, what);
        self.report.views += 1;
        if view.view.hash_tags() != self.nodes[&nk].view.view.hash_tags() {
            self.report.rule_changes += 1;
            let rule = if view.view.hash_tags() {
                "hash tags"
            } else {
                "whole keys"
            };
            let what = format!("{}: placement by {rule}", self.nodes[&nk].id);
            self.trace.notable(self.now, what);
        }
        let table_version = self.truth.table_version;
        let node = self.nodes.get_mut(&nk).expect("node");
        node.synced = true;
        node.view = view;
        node.belief = members;
        node.table_version = table_version;
        let inc = node.inc;
        for w in 0..node.workers.len() {
            let delay = self.rng.u64(0..=3);
            let r = Replica {
                node: nk,
                worker: w as u32,
            };
            self.schedule(delay, Event::AdoptView(r, inc));
        }
    }

    // ---- faults ---------------------------------------------------------------------------

    pub(super) fn up_nodes(&self) -> Vec<NodeKey> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.status == Status::Up)
            .map(|(k, _)| *k)
            .collect()
    }

    pub(super) fn fault(&mut self, kind: FaultKind) -> Result<(), String> {
        let ups = self.up_nodes();
        match kind {
            FaultKind::Join => {
                if ups.len() >= self.p.max_nodes {
                    return Ok(());
                }
                let down: Vec<String> = self
                    .nodes
                    .values()
                    .filter(|n| n.status == Status::Down)
                    .map(|n| n.id.clone())
                    .collect();
                let id = if !down.is_empty() && self.rng.bool() {
                    down[self.rng.usize(..down.len())].clone()
                } else {
                    self.next_fresh += 1;
                    format!("n{}", self.next_fresh - 1)
                };
                let nk = self.add_node(&id);
                self.truth.members.insert(nk);
                self.truth.left.remove(&nk);
                self.start_node(nk, BTreeSet::from([nk]), false);
                self.report.joins += 1;
                let workers = self.nodes[&nk].workers.len();
                self.trace
                    .notable(self.now, format!("{id} joins with {workers} workers"));
            }
            FaultKind::Leave => {
                // A node that has not joined the cluster yet cannot leave it.
                let synced: Vec<NodeKey> = ups
                    .iter()
                    .copied()
                    .filter(|k| self.nodes[k].synced)
                    .collect();
                if ups.len() < 2 || synced.is_empty() {
                    return Ok(());
                }
                let nk = synced[self.rng.usize(..synced.len())];
                let node = self.nodes.get_mut(&nk).expect("node");
                node.status = Status::Leaving;
                node.leave_deadline = self.now + LEAVE_DEADLINE_MS;
                // The requests in progress once the keys are handed off are waited for
                // (bounded) as long as a request to another worker may wait.
                node.leave = Some(node::leave::LeaveProgress::new(self.p.timeout_ms + 100));
                let (id, inc) = (node.id.clone(), node.inc);
                self.truth.members.remove(&nk);
                self.truth.left.insert(nk);
                self.trace.notable(self.now, format!("{id} leaves"));
                // agent.leave(): out of its own rings at once, then it tells the others.
                self.refresh_belief(nk);
                let first = self.p.leave_first_poll_ms.unwrap_or(3 * self.p.agent_ms);
                self.schedule(first, Event::LeavePoll(nk, inc));
            }
            FaultKind::Fail | FaultKind::Restart => {
                // One node stays up (a leaving node may crash too).
                let candidates: Vec<NodeKey> = self
                    .nodes
                    .iter()
                    .filter(|(_, n)| n.status != Status::Down)
                    .map(|(k, _)| *k)
                    .collect();
                if ups.len() < 2 {
                    return Ok(());
                }
                let nk = candidates[self.rng.usize(..candidates.len())];
                let id = self.nodes[&nk].id.clone();
                self.crash(nk, kind == FaultKind::Restart);
                if kind == FaultKind::Restart {
                    self.report.restarts += 1;
                    let after = self.rng.u64(20..=600);
                    self.schedule(after, Event::Rejoin(id));
                }
            }
            FaultKind::Partition => {
                if self.partition.is_some() {
                    return Ok(());
                }
                let mut live: Vec<NodeKey> = self
                    .nodes
                    .iter()
                    .filter(|(_, n)| n.status != Status::Down)
                    .map(|(k, _)| *k)
                    .collect();
                if live.len() < 2 {
                    return Ok(());
                }
                self.rng.shuffle(&mut live);
                let cut = self.rng.usize(1..live.len());
                let side: BTreeSet<NodeKey> = live[..cut].iter().copied().collect();
                let duration = self
                    .rng
                    .u64(self.p.min_partition_ms..=self.p.max_partition_ms);
                self.start_partition(side, duration);
            }
            FaultKind::SetVector => {
                let key = key_name(self.rng.usize(..self.p.keys));
                let vector = ReplicationVector {
                    memory: Replication {
                        global: self.rng.u32(1..=3),
                        local: self.rng.u32(1..=2),
                    },
                    disk: Replication {
                        global: 0,
                        local: 0,
                    },
                };
                self.truth.table_version += 1;
                let ts = Timestamp::new((EPOCH_MS + self.now) << 16 | self.truth.table_version, 0);
                self.truth.table.insert(Box::from(&key[..]), (ts, vector));
                self.report.vectors += 1;
                self.trace.notable(
                    self.now,
                    format!(
                        "replication of {} set to {}x{}",
                        String::from_utf8_lossy(&key),
                        vector.memory.global,
                        vector.memory.local
                    ),
                );
            }
        }
        Ok(())
    }

    /// Cuts the nodes of `side` off from the others for `duration` ms.
    pub fn start_partition(&mut self, side: BTreeSet<NodeKey>, duration: u64) {
        self.next_partition += 1;
        let id = self.next_partition;
        let names: Vec<&str> = side.iter().map(|k| self.nodes[k].id.as_str()).collect();
        self.trace.notable(
            self.now,
            format!("partition: [{}] cut off for {duration}ms", names.join(" ")),
        );
        self.partition = Some(Partition {
            id,
            side,
            start: self.now,
        });
        self.report.partitions += 1;
        self.schedule(duration, Event::PartitionEnd(id));
    }

    /// A node crashes: its state is gone. Writes whose every copy was there are lost.
    pub(super) fn crash(&mut self, nk: NodeKey, restart: bool) {
        let node = self.nodes.get_mut(&nk).expect("node");
        let was_member = self.truth.members.contains(&nk);
        node.status = Status::Down;
        self.report.repairs += node
            .workers
            .iter()
            .map(|w| w.core.stats().repairs)
            .sum::<u64>();
        node.workers.clear();
        let (id, inc) = (node.id.clone(), node.inc);
        self.report.failures += 1;
        self.trace.notable(
            self.now,
            format!(
                "{id} crashes{}",
                if restart { " (will restart)" } else { "" }
            ),
        );
        super::super::check::mark_lost(
            self,
            Loss::Crash(format!("{id} crashed at {}ms", self.now)),
        );
        if was_member {
            self.schedule(self.p.detect_ms, Event::Detect(nk, inc));
        }
    }

    /// A leaving node stops once every worker has handed everything off and finished the
    /// requests it had in progress then (as the node decides: `node::leave`).
    pub(super) fn leave_poll(&mut self, nk: NodeKey, inc: u64) -> Result<(), String> {
        let now = self.now;
        let node = self.nodes.get_mut(&nk).expect("node");
        if node.inc != inc || node.status != Status::Leaving {
            return Ok(());
        }
        let stats: Vec<_> = node.workers.iter().map(|w| w.core.stats()).collect();
        let progress = node.leave.get_or_insert_with(|| LeaveProgress::new(0));
        if let LeaveState::Done { open } = progress.step(&stats, now) {
            self.report.stopped_with_open_requests += open;
            let id = node.id.clone();
            node.status = Status::Down;
            node.leave = None;
            self.report.repairs += node
                .workers
                .iter()
                .map(|w| w.core.stats().repairs)
                .sum::<u64>();
            node.workers.clear();
            self.report.leaves += 1;
            self.trace
                .notable(self.now, format!("{id} has handed off its keys and stops"));
            super::super::check::mark_lost(
                self,
                Loss::Leave(format!("{id} left at {}ms", self.now)),
            );
            return Ok(());
        }
        let node = &self.nodes[&nk];
        if self.now >= node.leave_deadline {
            let mut keys: Vec<String> = Vec::new();
            for (w, sh) in node.workers.iter().enumerate() {
                for (k, r) in sh.core.shard().store().iter() {
                    keys.push(format!(
                        "{}{} on worker {w}",
                        String::from_utf8_lossy(k),
                        if r.is_live() { "" } else { " (tombstone)" }
                    ));
                }
            }
            keys.sort();
            return Err(format!(
                "{} has not handed everything off {LEAVE_DEADLINE_MS}ms after leaving \
                 ({stats:?}); keys: {}",
                node.id,
                keys.join(", ")
            ));
        }
        self.schedule(LEAVE_POLL_MS, Event::LeavePoll(nk, inc));
        Ok(())
    }
}
