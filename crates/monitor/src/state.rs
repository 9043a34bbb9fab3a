//! The policy's soft state between rounds: [`PolicyState`].
//!
//! Only what can be lost without harm (a restarted monitor starts with
//! `PolicyState::default()` and at worst repeats a request, as the paper's stateless monitor
//! does): when resources last changed, nodes requested but not joined, which keys were
//! changed lately, and the last actions for display. Every part is bounded.

use std::collections::{HashMap, VecDeque};

use crate::actions::Action;
use crate::config::PolicyConfig;
use crate::snapshot::{Snapshot, Tier};

/// How many past actions [`PolicyState::recent_actions`] keeps.
pub const RECENT_ACTIONS: usize = 64;

/// Nodes requested from the cluster manager that have not all joined yet.
#[derive(Clone, Debug, PartialEq)]
struct PendingAdd {
    /// Nodes asked for.
    count: u32,
    /// Ids (sorted) of the tier's nodes when they were asked for: any other alive node of the tier
    /// counts as one of them having joined.
    known: Vec<String>,
    /// When the last request was made.
    since_ms: u64,
}

/// A node asked to leave that is still in the membership.
#[derive(Clone, Debug, PartialEq)]
struct PendingRemoval {
    node_id: String,
    since_ms: u64,
}

/// Soft state of the policy engine, carried from one round to the next.
#[derive(Clone, Debug, Default)]
pub struct PolicyState {
    /// Time of the last resource change: nodes requested or removed by the policy, or the set
    /// of alive nodes changed (a join, a departure, a failure).
    last_change_ms: Option<u64>,
    /// Alive nodes seen last round, sorted; `None` before the first round.
    members: Option<Vec<(Tier, String)>>,
    pending_add: [Option<PendingAdd>; 2],
    pending_removal: [Option<PendingRemoval>; 2],
    /// Keys changed lately, oldest first, with when.
    recent_keys: VecDeque<(Vec<u8>, u64)>,
    /// Last change of each key in `recent_keys`.
    recent_index: HashMap<Vec<u8>, u64>,
    /// The last actions with the round they were decided in.
    recent_actions: VecDeque<(u64, Action)>,
}

impl PolicyState {
    /// A fresh state (as after a monitor restart).
    pub fn new() -> PolicyState {
        PolicyState::default()
    }

    /// The last actions, oldest first, with the `now_ms` of their round (at most
    /// [`RECENT_ACTIONS`]).
    pub fn recent_actions(&self) -> impl Iterator<Item = &(u64, Action)> {
        self.recent_actions.iter()
    }

    /// Nodes of `tier` requested and not yet seen joining.
    pub fn pending_additions(&self, tier: Tier) -> u32 {
        self.pending_add[tier.index()]
            .as_ref()
            .map_or(0, |p| p.count)
    }

    /// The node of `tier` asked to leave and still in the membership, if any.
    pub fn pending_removal(&self, tier: Tier) -> Option<&str> {
        self.pending_removal[tier.index()]
            .as_ref()
            .map(|p| p.node_id.as_str())
    }

    /// When resources last changed, in the snapshots' clock.
    pub fn last_resource_change_ms(&self) -> Option<u64> {
        self.last_change_ms
    }

    /// Whether a round at `now_ms` falls in the grace period. A clock that went backwards
    /// counts as inside it.
    pub fn in_grace(&self, now_ms: u64, config: &PolicyConfig) -> bool {
        self.last_change_ms
            .is_some_and(|t| now_ms.saturating_sub(t) < config.grace_ms || now_ms < t)
    }

    /// Whether `key` was changed less than `key_cooldown_ms` before `now_ms`.
    pub fn in_cooldown(&self, key: &[u8], now_ms: u64, config: &PolicyConfig) -> bool {
        self.recent_index
            .get(key)
            .is_some_and(|&t| now_ms.saturating_sub(t) < config.key_cooldown_ms || now_ms < t)
    }

    /// Brings the state up to a new snapshot: notices membership changes (restarting the
    /// grace period), settles pending additions and removals, forgets expired cooldowns.
    pub(crate) fn observe(&mut self, snap: &Snapshot, config: &PolicyConfig) {
        let now = snap.now_ms;
        let mut members: Vec<(Tier, String)> = snap
            .nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| (n.tier, n.id.clone()))
            .collect();
        members.sort();
        members.dedup();
        if self.members.as_ref().is_some_and(|m| *m != members) {
            self.last_change_ms = Some(now);
        }
        self.members = Some(members);

        for tier in Tier::ALL {
            let slot = &mut self.pending_add[tier.index()];
            if let Some(p) = slot {
                let joined = snap
                    .alive(tier)
                    .filter(|n| p.known.binary_search(&n.id).is_err())
                    .count();
                let joined = u32::try_from(joined).unwrap_or(u32::MAX);
                let expired = now.saturating_sub(p.since_ms) >= config.pending_timeout_ms;
                if joined >= p.count || expired {
                    *slot = None;
                } else {
                    // Joined nodes become known, so each is counted once.
                    p.count -= joined;
                    p.known.extend(snap.alive(tier).map(|n| n.id.clone()));
                    p.known.sort();
                    p.known.dedup();
                }
            }
            let slot = &mut self.pending_removal[tier.index()];
            if let Some(p) = slot {
                let present = snap.alive(tier).any(|n| n.id == p.node_id);
                let expired = now.saturating_sub(p.since_ms) >= config.pending_timeout_ms;
                if !present || expired {
                    *slot = None;
                }
            }
        }

        while let Some((key, at)) = self.recent_keys.front() {
            if now.saturating_sub(*at) < config.key_cooldown_ms {
                break;
            }
            if self.recent_index.get(key) == Some(at) {
                self.recent_index.remove(key);
            }
            self.recent_keys.pop_front();
        }
    }

    /// Records the actions of a round decided at `now_ms`.
    pub(crate) fn record(&mut self, snap: &Snapshot, actions: &[Action], config: &PolicyConfig) {
        let now = snap.now_ms;
        for action in actions {
            match action {
                Action::SetReplication { key, .. } | Action::ResetReplication { key, .. } => {
                    self.remember_key(key, now, config);
                }
                Action::AddNodes { tier, count, .. } => {
                    self.last_change_ms = Some(now);
                    let slot = &mut self.pending_add[tier.index()];
                    let known = || snap.alive(*tier).map(|n| n.id.clone()).collect::<Vec<_>>();
                    match slot {
                        Some(p) => {
                            p.count = p.count.saturating_add(*count);
                            p.since_ms = now;
                        }
                        None => {
                            let mut known = known();
                            known.sort();
                            *slot = Some(PendingAdd {
                                count: *count,
                                known,
                                since_ms: now,
                            });
                        }
                    }
                }
                Action::RemoveNode { tier, node_id, .. } => {
                    self.last_change_ms = Some(now);
                    self.pending_removal[tier.index()] = Some(PendingRemoval {
                        node_id: node_id.clone(),
                        since_ms: now,
                    });
                }
            }
            if self.recent_actions.len() == RECENT_ACTIONS {
                self.recent_actions.pop_front();
            }
            self.recent_actions.push_back((now, action.clone()));
        }
    }

    fn remember_key(&mut self, key: &[u8], now: u64, config: &PolicyConfig) {
        let capacity = usize::try_from(config.recent_keys_capacity.max(1)).unwrap_or(usize::MAX);
        while self.recent_keys.len() >= capacity {
            let Some((old, at)) = self.recent_keys.pop_front() else {
                break;
            };
            if self.recent_index.get(&old) == Some(&at) {
                self.recent_index.remove(&old);
            }
        }
        self.recent_index.insert(key.to_vec(), now);
        self.recent_keys.push_back((key.to_vec(), now));
    }
}
