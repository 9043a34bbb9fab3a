//! Membership as a lattice, and the failure detector that drives it.
//!
//! Every node keeps a [`Membership`]: node id → [`Member`] (incarnation, status, heartbeat,
//! role and addresses). Nodes exchange it by gossip and merge; the merge is a lattice, so
//! every node converges on the same membership whatever the order of messages.
//!
//! - **Member merge:** the higher `(incarnation, heartbeat)` wins wholesale; for equal
//!   ones status and description take their maximum (status order: alive < suspect <
//!   dead < left).
//! - **Liveness:** a node increments its own heartbeat every gossip round. The
//!   [`Detector`] (local, not gossiped) records when each member's heartbeat last grew; a
//!   member silent for `suspect_after` becomes *suspect* and after `dead_after` *dead* — at
//!   the heartbeat it was last seen with. A verdict is about that heartbeat: a later
//!   heartbeat of the same incarnation, seen by anyone, supersedes it. So after a
//!   partition, where each side declared the other dead while every node kept beating,
//!   one exchange across it restores everyone — no stale verdict from one side can take
//!   a node the other side is hearing from out of the rings.
//! - **Refutation (SWIM):** a node that learns it is suspected or declared dead at its
//!   current heartbeat (it stopped beating for a while: a stalled process) takes a new,
//!   higher incarnation, which overrides the verdict. A restarted node starts with a new
//!   incarnation (the clock), so it rejoins.
//!
//! Everything here is pure (time is passed in), so unit tests drive it with any timing.

use std::collections::{BTreeMap, HashMap};

use lattice::Lattice;
use placement::Tier;

/// A member's liveness, in merge order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Alive.
    Alive,
    /// Missed heartbeats for `suspect_after`; still in the rings.
    Suspect,
    /// Missed heartbeats for `dead_after`; out of the rings, its keys re-replicated.
    Dead,
    /// Left gracefully after handing off its keys.
    Left,
}

impl Status {
    /// True while the member is in the rings.
    pub fn in_ring(self) -> bool {
        matches!(self, Status::Alive | Status::Suspect)
    }
}

/// What a member does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// A storage node of a tier.
    Storage(Tier),
    /// A routing node: answers "where is key k", holds no data.
    Routing,
}

impl Role {
    /// The role's name on the wire: `memory`, `disk` or `routing`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Storage(Tier::Memory) => "memory",
            Role::Storage(Tier::Disk) => "disk",
            Role::Routing => "routing",
        }
    }

    /// Parses a role name.
    pub fn from_name(s: &str) -> Option<Role> {
        match s {
            "memory" => Some(Role::Storage(Tier::Memory)),
            "disk" => Some(Role::Storage(Tier::Disk)),
            "routing" => Some(Role::Routing),
            _ => None,
        }
    }
}

/// How to reach a member; fixed for an incarnation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Description {
    /// Role.
    pub role: Role,
    /// Native front address.
    pub front: String,
    /// RESP address (empty for routing nodes).
    pub resp: String,
    /// Native address of each worker (empty for routing nodes).
    pub workers: Vec<String>,
    /// Virtual nodes per worker and per node.
    pub vnodes: u32,
    /// Peer-plane address: where other nodes' workers and agents reach this node.
    pub peer: String,
    /// Placement version the node uses (`placement::PLACEMENT_HASH_TAGS`, or
    /// `PLACEMENT_WHOLE_KEY` with `hash_tags = false`; 0 from an older node).
    pub placement: u32,
}

/// One member's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Grows with every restart and every refuted suspicion.
    pub incarnation: u64,
    /// Liveness.
    pub status: Status,
    /// Grows while the member is alive (within an incarnation).
    pub heartbeat: u64,
    /// Role and addresses.
    pub desc: Description,
}

impl Lattice for Member {
    /// The higher `(incarnation, heartbeat)` wins; equal ones take the maximum of status
    /// and description. (A lexicographic product of a chain and a lattice: a lattice.)
    fn merge(&mut self, other: Self) -> bool {
        let mine = (self.incarnation, self.heartbeat);
        let theirs = (other.incarnation, other.heartbeat);
        if theirs > mine {
            *self = other;
            return true;
        }
        if theirs < mine {
            return false;
        }
        let mut changed = false;
        if other.status > self.status {
            self.status = other.status;
            changed = true;
        }
        if other.desc > self.desc {
            self.desc = other.desc;
            changed = true;
        }
        changed
    }
}

/// The membership lattice: node id → member, merged per entry.
pub type Membership = lattice::Map<String, Member>;

/// Failure detector settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectorConfig {
    /// Silence after which a member is suspected, in ms.
    pub suspect_after_ms: u64,
    /// Silence after which a member is declared dead, in ms.
    pub dead_after_ms: u64,
}

/// Local failure detection: when each member's heartbeat last grew.
#[derive(Debug, Default)]
pub struct Detector {
    /// Member → (last heartbeat seen, incarnation, when it was first seen at that value).
    seen: HashMap<String, (u64, u64, u64)>,
}

impl Detector {
    /// A detector that has seen nobody.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets what was seen (e.g. after this node was partitioned away, so members are not
    /// declared dead at once on its return).
    pub fn reset(&mut self) {
        self.seen.clear();
    }

    /// Looks at the membership at `now_ms` and returns the status changes to apply to other
    /// members: `(id, incarnation, new status)`.
    pub fn check(
        &mut self,
        membership: &Membership,
        me: &str,
        now_ms: u64,
        config: DetectorConfig,
    ) -> Vec<(String, u64, Status)> {
        let mut changes = Vec::new();
        for (id, m) in membership.iter() {
            if id == me || !m.status.in_ring() {
                continue;
            }
            let entry = self
                .seen
                .entry(id.clone())
                .or_insert((m.heartbeat, m.incarnation, now_ms));
            if entry.0 != m.heartbeat || entry.1 != m.incarnation {
                *entry = (m.heartbeat, m.incarnation, now_ms);
                continue;
            }
            let silent = now_ms.saturating_sub(entry.2);
            if silent >= config.dead_after_ms {
                changes.push((id.clone(), m.incarnation, Status::Dead));
            } else if silent >= config.suspect_after_ms && m.status == Status::Alive {
                changes.push((id.clone(), m.incarnation, Status::Suspect));
            }
        }
        self.seen.retain(|id, _| membership.get(id).is_some());
        changes
    }
}

/// This node's own entry, kept alive: one heartbeat per round, and a new incarnation when
/// the cluster suspects it (or declared it dead or gone) at the current one.
pub fn beat(membership: &mut Membership, me: &str, now_ms: u64, leaving: bool) {
    let Some(current) = membership.get(me).cloned() else {
        return;
    };
    let mut next = current.clone();
    if leaving {
        next.status = Status::Left;
    } else if current.status != Status::Alive {
        next.incarnation = current.incarnation.saturating_add(1).max(now_ms);
        next.status = Status::Alive;
        next.heartbeat = 0;
    }
    next.heartbeat = next.heartbeat.saturating_add(1);
    membership.insert_merge(me.to_string(), next);
}

/// Applies the detector's verdicts.
pub fn apply_changes(membership: &mut Membership, changes: Vec<(String, u64, Status)>) {
    for (id, incarnation, status) in changes {
        if let Some(m) = membership.get(&id) {
            if m.incarnation == incarnation {
                let mut next = m.clone();
                next.status = next.status.max(status);
                membership.insert_merge(id, next);
            }
        }
    }
}

/// The members in the rings, by role: what a cluster view is built from.
pub fn ring_members(membership: &Membership) -> BTreeMap<String, Member> {
    membership
        .iter()
        .filter(|(_, m)| m.status.in_ring())
        .map(|(id, m)| (id.clone(), m.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc() -> Description {
        Description {
            role: Role::Storage(Tier::Memory),
            front: "f".into(),
            resp: "r".into(),
            workers: vec!["w".into()],
            vnodes: 8,
            peer: "p".into(),
            placement: placement::PLACEMENT_HASH_TAGS,
        }
    }

    fn member(incarnation: u64, status: Status, heartbeat: u64) -> Member {
        Member {
            incarnation,
            status,
            heartbeat,
            desc: desc(),
        }
    }

    const CONFIG: DetectorConfig = DetectorConfig {
        suspect_after_ms: 1_000,
        dead_after_ms: 3_000,
    };

    #[test]
    fn member_merge_is_a_lattice() {
        let samples = [
            member(1, Status::Alive, 5),
            member(1, Status::Suspect, 3),
            member(1, Status::Dead, 9),
            member(1, Status::Dead, 5),
            member(1, Status::Alive, 9),
            member(2, Status::Alive, 0),
            member(2, Status::Left, 1),
            member(2, Status::Suspect, 1),
        ];
        for a in &samples {
            lattice::laws::check_idempotent(a).unwrap();
            for b in &samples {
                lattice::laws::check_commutative(a, b).unwrap();
                for c in &samples {
                    lattice::laws::check_associative(a, b, c).unwrap();
                }
            }
        }
    }

    #[test]
    fn silence_leads_to_suspect_then_dead_and_refutation_wins() {
        let mut m = Membership::new();
        m.insert_merge("a".into(), member(10, Status::Alive, 1));
        m.insert_merge("b".into(), member(20, Status::Alive, 1));
        let mut d = Detector::new();
        assert!(d.check(&m, "a", 0, CONFIG).is_empty());
        // b's heartbeat stops.
        let c = d.check(&m, "a", 1_500, CONFIG);
        assert_eq!(c, vec![("b".to_string(), 20, Status::Suspect)]);
        apply_changes(&mut m, c);
        assert_eq!(m.get("b").unwrap().status, Status::Suspect);
        let c = d.check(&m, "a", 3_000, CONFIG);
        assert_eq!(c, vec![("b".to_string(), 20, Status::Dead)]);
        apply_changes(&mut m, c);
        // b learns it was declared dead and refutes with a new incarnation.
        let mut at_b = m.clone();
        beat(&mut at_b, "b", 50, false);
        let b = at_b.get("b").unwrap();
        assert_eq!((b.incarnation, b.status), (50, Status::Alive));
        m.merge(at_b);
        assert_eq!(m.get("b").unwrap().status, Status::Alive);
        assert!(
            d.check(&m, "a", 3_100, CONFIG).is_empty(),
            "a new incarnation is progress"
        );
    }

    /// Each side of a partition declares the other dead while every node keeps beating.
    /// Once they talk again, the later heartbeats override the verdicts everywhere: nobody
    /// needs a new incarnation, and a stale verdict from one side never takes out a node
    /// the other side hears from.
    #[test]
    fn a_healed_partition_needs_no_refutation() {
        let mut cluster = Membership::new();
        for id in ["a", "b", "c"] {
            cluster.insert_merge(id.into(), member(1, Status::Alive, 10));
        }
        // `a` is cut off from `b` and `c`.
        let (mut side_a, mut side_bc) = (cluster.clone(), cluster.clone());
        let mut detector_a = Detector::new();
        let mut detector_bc = Detector::new();
        assert!(detector_a.check(&side_a, "a", 0, CONFIG).is_empty());
        assert!(detector_bc.check(&side_bc, "b", 0, CONFIG).is_empty());
        for t in 1..=40u64 {
            let now = t * 100;
            beat(&mut side_a, "a", now, false);
            beat(&mut side_bc, "b", now, false);
            beat(&mut side_bc, "c", now, false);
            let verdicts = detector_a.check(&side_a, "a", now, CONFIG);
            apply_changes(&mut side_a, verdicts);
            let verdicts = detector_bc.check(&side_bc, "b", now, CONFIG);
            apply_changes(&mut side_bc, verdicts);
        }
        assert_eq!(side_a.get("b").unwrap().status, Status::Dead);
        assert_eq!(side_a.get("c").unwrap().status, Status::Dead);
        assert_eq!(side_bc.get("a").unwrap().status, Status::Dead);
        // Heal: one push-pull exchange.
        let mut healed_a = side_a.clone();
        healed_a.merge(side_bc.clone());
        let mut healed_bc = side_bc.clone();
        healed_bc.merge(side_a.clone());
        assert_eq!(healed_a, healed_bc);
        for (id, m) in healed_a.iter() {
            assert_eq!(m.status, Status::Alive, "{id}");
            assert_eq!(m.incarnation, 1, "{id} needed no new incarnation");
        }
        // A verdict at the latest heartbeat (the member stopped beating) still holds.
        let mut stalled = healed_a.clone();
        apply_changes(&mut stalled, vec![("c".to_string(), 1, Status::Dead)]);
        let mut merged = healed_a.clone();
        merged.merge(stalled);
        assert_eq!(merged.get("c").unwrap().status, Status::Dead);
    }

    #[test]
    fn heartbeats_keep_a_member_alive_and_leaving_is_final() {
        let mut m = Membership::new();
        m.insert_merge("a".into(), member(1, Status::Alive, 1));
        m.insert_merge("b".into(), member(1, Status::Alive, 1));
        let mut d = Detector::new();
        for t in 0..10u64 {
            beat(&mut m, "b", t * 900, false);
            assert!(d.check(&m, "a", t * 900, CONFIG).is_empty());
        }
        beat(&mut m, "b", 10_000, true);
        assert_eq!(m.get("b").unwrap().status, Status::Left);
        assert!(!ring_members(&m).contains_key("b"));
        assert!(ring_members(&m).contains_key("a"));
    }
}
