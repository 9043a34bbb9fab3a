//! Authentication and permissions of the native protocol: the `Auth` request, and what
//! each request needs (see [`crate::auth`]).

use wire::pb::request::Op as ReqOp;

use crate::auth::{AuthError, Permission, User};

/// What may let a connection ask for the topology before it authenticates.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PreAuth<'a> {
    /// Peers are not authenticated (no cluster secret, no mutual TLS): anyone who reaches
    /// the peer port learns the members anyway, so the client ports need not hide them.
    pub open_membership: bool,
    /// The cluster secret a topology request may prove.
    pub secret: Option<&'a str>,
    /// The connection presented a certificate the cluster's CA signed (a node).
    pub node_certificate: bool,
}

/// True for the requests answered before authentication: a `GetTopology` from another
/// node — a node joining a cluster asks a seed's front port for the members (it holds no
/// client password) — proven by the cluster secret or a node certificate, or from anyone
/// while peers are not authenticated at all. It tells member addresses and ids, never
/// data.
pub(crate) fn before_auth(op: &ReqOp, pre: &PreAuth<'_>) -> bool {
    let ReqOp::Topology(t) = op else {
        return false;
    };
    if pre.open_membership || pre.node_certificate {
        return true;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    pre.secret
        .is_some_and(|s| crate::peer::secret::verify_topology(t, s, now_ms).is_ok())
}

/// Checks that `user` may run `op`: reads (and subscriptions) need `read` and writes
/// `write`, on keys matching the user's patterns (every key of a multi-key request);
/// operator requests (`Admin`) need `admin`; topology, status, ping, locate and holds
/// need only an authenticated connection.
pub(super) fn permit(user: &User, op: &ReqOp) -> Result<(), AuthError> {
    match op {
        ReqOp::Get(g) => user.check(Permission::Read, [&g.key[..]]),
        ReqOp::GetAll(g) => user.check(Permission::Read, [&g.key[..]]),
        ReqOp::GetDelta(g) => user.check(Permission::Read, [&g.key[..]]),
        ReqOp::GetMany(g) => user.check(Permission::Read, g.keys.iter().map(|k| &k[..])),
        ReqOp::Subscribe(s) => user.check(Permission::Read, s.keys.iter().map(|k| &k[..])),
        ReqOp::Put(p) => user.check(Permission::Write, [&p.key[..]]),
        ReqOp::PutAll(p) => user.check(Permission::Write, [&p.key[..]]),
        ReqOp::Delete(d) => user.check(Permission::Write, [&d.key[..]]),
        ReqOp::Update(u) => user.check(Permission::Write, [&u.key[..]]),
        ReqOp::PutMany(p) => user.check(Permission::Write, p.puts.iter().map(|p| &p.key[..])),
        ReqOp::DeleteMany(d) => user.check(Permission::Write, d.keys.iter().map(|k| &k[..])),
        ReqOp::Admin(_) => user.check(Permission::Admin, []),
        ReqOp::Unsubscribe(_)
        | ReqOp::Topology(_)
        | ReqOp::Status(_)
        | ReqOp::Ping(_)
        | ReqOp::Locate(_)
        | ReqOp::Holds(_)
        | ReqOp::Auth(_)
        // Refused anyway, whoever sends them.
        | ReqOp::Replicate(_)
        | ReqOp::Forward(_)
        | ReqOp::AntiEntropy(_)
        | ReqOp::SyncCluster(_)
        | ReqOp::Fetch(_)
        | ReqOp::SetReplication(_)
        | ReqOp::Leave(_) => Ok(()),
    }
}
