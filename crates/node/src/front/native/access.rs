//! Authentication and permissions of the native protocol: the `Auth` request, and what
//! each request needs (see [`crate::auth`]).

use wire::pb::request::Op as ReqOp;

use crate::auth::{AuthError, Permission, User};

/// True for the requests answered before authentication: `GetTopology` only. A node
/// joining a cluster asks a seed's front port for the membership with it (nodes hold no
/// client password to authenticate with); it tells member addresses and ids, never data.
/// Once peers authenticate each other (a cluster secret), joining can move to the peer port
/// and this exemption go.
pub(crate) fn before_auth(op: &ReqOp) -> bool {
    matches!(op, ReqOp::Topology(_))
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
