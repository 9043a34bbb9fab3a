//! Cluster metadata as gossiped between nodes: the membership lattice with its protobuf
//! form, and the view it produces with the replication table (whose exchange is in
//! [`super::replication`]).

use placement::{NodeInfo, ReplicationVector};
use wire::pb;

use super::membership::{ring_members, Description, Member, Membership, Role, Status};
use crate::view::{rings_fingerprint, ReplicationTable, ViewState};

/// Encodes a member.
pub fn member_to_pb(id: &str, m: &Member) -> pb::Member {
    pb::Member {
        node_id: id.to_string(),
        incarnation: m.incarnation,
        status: match m.status {
            Status::Alive => pb::NodeStatus::Alive,
            Status::Suspect => pb::NodeStatus::Suspect,
            Status::Dead => pb::NodeStatus::Dead,
            Status::Left => pb::NodeStatus::Left,
        } as i32,
        heartbeat: m.heartbeat,
        role: m.desc.role.name().to_string(),
        front: m.desc.front.clone(),
        resp: m.desc.resp.clone(),
        workers: m.desc.workers.clone(),
        vnodes: m.desc.vnodes,
        peer: m.desc.peer.clone(),
        placement: m.desc.placement,
    }
}

/// Most members a node keeps: gossip naming more new nodes than this is ignored beyond it.
pub const MAX_MEMBERS: usize = 4096;
/// Most virtual nodes a member may claim (each is a point on every worker's ring).
pub const MAX_VNODES: u32 = 4096;
/// Most workers a member may claim (a node runs at most 1,024).
pub const MAX_WORKERS: usize = 1024;
/// Longest node id or address a member may carry, in bytes.
pub const MAX_FIELD_BYTES: usize = 256;
/// How far ahead of this node's clock an incarnation may be (incarnations are wall-clock
/// milliseconds): a larger one is forged or from a badly wrong clock, and accepting it
/// would let it win against every refutation its node can make.
pub const MAX_INCARNATION_AHEAD_MS: u64 = 24 * 60 * 60 * 1000;
/// Largest heartbeat a member may claim (one per gossip round: ~35 years at 1 ms rounds).
pub const MAX_HEARTBEAT: u64 = 1 << 40;

/// Why a member from the network was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemberError {
    /// An unknown status or role.
    #[error("unknown status or role")]
    Unknown,
    /// A field out of its bounds.
    #[error("{0}")]
    OutOfBounds(String),
}

/// Decodes a member from the network, checking every field against its bounds (`now_ms`:
/// this node's wall clock, for the incarnation).
pub fn member_from_pb(m: &pb::Member, now_ms: u64) -> Result<(String, Member), MemberError> {
    let status = match pb::NodeStatus::try_from(m.status).map_err(|_| MemberError::Unknown)? {
        pb::NodeStatus::Alive => Status::Alive,
        pb::NodeStatus::Suspect => Status::Suspect,
        pb::NodeStatus::Dead => Status::Dead,
        pb::NodeStatus::Left => Status::Left,
    };
    let bound = |ok: bool, what: String| {
        if ok {
            Ok(())
        } else {
            Err(MemberError::OutOfBounds(what))
        }
    };
    bound(
        !m.node_id.is_empty() && m.node_id.len() <= MAX_FIELD_BYTES,
        format!("node id of {} bytes", m.node_id.len()),
    )?;
    bound(
        m.vnodes <= MAX_VNODES,
        format!("{} vnodes (at most {MAX_VNODES})", m.vnodes),
    )?;
    bound(
        m.workers.len() <= MAX_WORKERS,
        format!("{} workers (at most {MAX_WORKERS})", m.workers.len()),
    )?;
    let fields = [&m.front, &m.resp, &m.peer, &m.role];
    bound(
        fields.iter().all(|f| f.len() <= MAX_FIELD_BYTES)
            && m.workers.iter().all(|w| w.len() <= MAX_FIELD_BYTES),
        format!("an address over {MAX_FIELD_BYTES} bytes"),
    )?;
    bound(
        m.incarnation <= now_ms.saturating_add(MAX_INCARNATION_AHEAD_MS),
        format!(
            "incarnation {} is ahead of this node's clock ({now_ms})",
            m.incarnation
        ),
    )?;
    bound(
        m.heartbeat <= MAX_HEARTBEAT,
        format!("heartbeat {}", m.heartbeat),
    )?;
    let role = Role::from_name(&m.role).ok_or(MemberError::Unknown)?;
    Ok((
        m.node_id.clone(),
        Member {
            incarnation: m.incarnation,
            status,
            heartbeat: m.heartbeat,
            desc: Description {
                role,
                front: m.front.clone(),
                resp: m.resp.clone(),
                workers: m.workers.clone(),
                vnodes: m.vnodes.max(1),
                peer: m.peer.clone(),
                placement: m.placement,
            },
        },
    ))
}

/// Encodes a membership.
pub fn membership_to_pb(m: &Membership) -> Vec<pb::Member> {
    m.iter()
        .map(|(id, member)| member_to_pb(id, member))
        .collect()
}

/// Merges protobuf members into a membership, skipping (and logging) members that do not
/// decode or are out of bounds, and new members beyond [`MAX_MEMBERS`] (`known`: how many
/// members the node already has; members it knows are always merged). Returns true if
/// `into` changed.
pub fn merge_members(
    into: &mut Membership,
    members: &[pb::Member],
    known: &Membership,
    now_ms: u64,
) -> bool {
    let mut changed = false;
    let mut room = MAX_MEMBERS.saturating_sub(known.len());
    for m in members {
        match member_from_pb(m, now_ms) {
            Ok((id, member)) => {
                if known.get(&id).is_none() && into.get(&id).is_none() {
                    if room == 0 {
                        tracing::warn!(node = %id, "member ignored: the membership is full ({MAX_MEMBERS} members)");
                        continue;
                    }
                    room -= 1;
                }
                changed |= into.insert_merge(id, member);
            }
            Err(e) => {
                let id: String = m.node_id.chars().take(64).collect();
                tracing::warn!(node = %id, error = %e, "member from a peer refused");
            }
        }
    }
    changed
}

/// The storage nodes in the rings, as placement describes them.
pub fn ring_nodes(membership: &Membership) -> Vec<NodeInfo> {
    ring_members(membership)
        .into_iter()
        .filter_map(|(id, m)| match m.desc.role {
            Role::Storage(tier) => Some(NodeInfo {
                id,
                tier,
                workers: m.desc.workers,
                front: m.desc.front,
                resp: m.desc.resp,
                peer: m.desc.peer,
                vnodes: m.desc.vnodes,
                placement: m.desc.placement,
            }),
            Role::Routing => None,
        })
        .collect()
}

/// Storage members declared dead (not those that left).
fn dead_storage_nodes(membership: &Membership) -> usize {
    membership
        .iter()
        .filter(|(_, m)| m.status == Status::Dead && matches!(m.desc.role, Role::Storage(_)))
        .count()
}

/// Builds the view workers route by.
pub fn build_view(
    version: u64,
    membership: &Membership,
    replication: &ReplicationTable,
    default: ReplicationVector,
) -> ViewState {
    let nodes = ring_nodes(membership);
    ViewState {
        version,
        rings: rings_fingerprint(&nodes),
        view: placement::ClusterView::new(nodes),
        replication: replication.clone(),
        default,
        dead: dead_storage_nodes(membership),
    }
}

/// True if `a` and `b` put the same storage nodes in the rings.
pub fn same_rings(a: &Membership, b: &Membership) -> bool {
    rings_fingerprint(&ring_nodes(a)) == rings_fingerprint(&ring_nodes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement::Tier;

    #[test]
    fn members_round_trip() {
        let mut m = Membership::new();
        m.insert_merge(
            "n1".into(),
            Member {
                incarnation: 7,
                status: Status::Suspect,
                heartbeat: 3,
                desc: Description {
                    role: Role::Storage(Tier::Memory),
                    front: "a:1".into(),
                    resp: "a:2".into(),
                    workers: vec!["a:3".into()],
                    vnodes: 64,
                    peer: "a:4".into(),
                    placement: placement::PLACEMENT_HASH_TAGS,
                },
            },
        );
        let mut back = Membership::new();
        let none = Membership::new();
        assert!(merge_members(&mut back, &membership_to_pb(&m), &none, 10));
        assert_eq!(back, m);
        assert!(
            !merge_members(&mut back, &membership_to_pb(&m), &none, 10),
            "idempotent"
        );
    }

    fn member(id: &str, incarnation: u64) -> pb::Member {
        pb::Member {
            node_id: id.into(),
            incarnation,
            status: pb::NodeStatus::Alive as i32,
            heartbeat: 1,
            role: "memory".into(),
            front: "a:1".into(),
            resp: "a:2".into(),
            workers: vec!["a:3".into()],
            vnodes: 64,
            peer: "a:4".into(),
            placement: placement::PLACEMENT_HASH_TAGS,
        }
    }

    /// The hash-tag rule is in force only when every storage member advertises it; a
    /// member too old to say (0) keeps the whole-key rule, and the rule is part of the
    /// rings' fingerprint (a change of rule moves keys like a change of members).
    #[test]
    fn hash_tags_need_every_storage_member() {
        let now = 10;
        let view_of = |members: &[pb::Member]| {
            let mut m = Membership::new();
            assert!(merge_members(&mut m, members, &Membership::new(), now));
            build_view(
                1,
                &m,
                &ReplicationTable::new(),
                crate::view::default_vector(1, 1),
            )
        };
        let new = |id: &str| member(id, 1);
        let old = |id: &str| pb::Member {
            placement: 0,
            ..member(id, 1)
        };
        let whole = |id: &str| pb::Member {
            placement: placement::PLACEMENT_WHOLE_KEY,
            ..member(id, 1)
        };
        let routing = pb::Member {
            role: "routing".into(),
            placement: 0,
            ..member("r", 1)
        };
        let all_new = view_of(&[new("a"), new("b"), routing.clone()]);
        assert!(all_new.view.hash_tags(), "routing members do not count");
        let mixed = view_of(&[new("a"), old("b")]);
        assert!(!mixed.view.hash_tags());
        assert!(!view_of(&[new("a"), whole("b")]).view.hash_tags());
        assert_ne!(all_new.rings, view_of(&[new("a"), old("b"), routing]).rings);
        // Without the rule the fingerprint is the one of versions before it.
        assert_eq!(
            mixed.rings,
            crate::view::rings_fingerprint(&placement_free(&ring_nodes(&{
                let mut m = Membership::new();
                merge_members(&mut m, &[new("a"), old("b")], &Membership::new(), now);
                m
            })))
        );
        // The placement each member advertises survives the round trip.
        let mut m = Membership::new();
        merge_members(&mut m, &[new("a"), old("b")], &Membership::new(), now);
        let back = membership_to_pb(&m);
        let a = back.iter().find(|x| x.node_id == "a").unwrap();
        assert_eq!(a.placement, placement::PLACEMENT_HASH_TAGS);
        assert_eq!(back.iter().find(|x| x.node_id == "b").unwrap().placement, 0);
    }

    /// `nodes` as an older version saw them (no placement field, whole keys).
    fn placement_free(nodes: &[NodeInfo]) -> Vec<NodeInfo> {
        nodes
            .iter()
            .map(|n| NodeInfo {
                placement: 0,
                ..n.clone()
            })
            .collect()
    }

    #[test]
    fn members_out_of_bounds_are_refused() {
        let now = 1_000_000;
        assert!(member_from_pb(&member("ok", now), now).is_ok());
        let forged = [
            pb::Member {
                vnodes: u32::MAX,
                ..member("vnodes", now)
            },
            pb::Member {
                incarnation: u64::MAX,
                status: pb::NodeStatus::Left as i32,
                ..member("inc", now)
            },
            pb::Member {
                heartbeat: u64::MAX,
                ..member("hb", now)
            },
            pb::Member {
                workers: vec!["w".into(); MAX_WORKERS + 1],
                ..member("workers", now)
            },
            pb::Member {
                front: "x".repeat(MAX_FIELD_BYTES + 1),
                ..member("front", now)
            },
            member(&"n".repeat(MAX_FIELD_BYTES + 1), now),
            member("", now),
        ];
        for m in &forged {
            assert!(
                matches!(member_from_pb(m, now), Err(MemberError::OutOfBounds(_))),
                "{m:?} accepted"
            );
        }
        let mut into = Membership::new();
        assert!(!merge_members(&mut into, &forged, &Membership::new(), now));
        assert_eq!(into.len(), 0);
    }

    #[test]
    fn gossip_cannot_grow_the_membership_past_its_bound() {
        let now = 1_000_000;
        let many: Vec<pb::Member> = (0..MAX_MEMBERS + 100)
            .map(|i| member(&format!("n{i}"), now))
            .collect();
        let mut into = Membership::new();
        assert!(merge_members(&mut into, &many, &Membership::new(), now));
        assert_eq!(into.len(), MAX_MEMBERS);
        // Members already known are still merged when the membership is full.
        let mut newer = member("n0", now);
        newer.heartbeat = 9;
        let mut again = Membership::new();
        assert!(merge_members(
            &mut again,
            &[newer, member("extra", now)],
            &into,
            now
        ));
        assert_eq!(again.len(), 1);
        assert_eq!(again.get("n0").map(|m| m.heartbeat), Some(9));
    }
}
