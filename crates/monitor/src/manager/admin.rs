//! The admin request both backends send: `Admin.leave` to the node being removed.

use client::connection::{ClientTls, Connection, Credentials};
use client::ClientError;
use wire::pb;

/// How the manager authenticates to nodes for admin requests (a leave needs the admin
/// permission on a node with users).
#[derive(Clone, Debug, Default)]
pub struct AdminAccess {
    /// A user with the admin permission, and its password. Default: none (a node without
    /// users).
    pub credentials: Option<Credentials>,
    /// TLS to the nodes' front ports. Default: none (plain TCP).
    pub tls: Option<ClientTls>,
}

/// Why a leave request failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaveError {
    /// The node could not be reached, or the connection broke.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The node refused (e.g. permission denied, or it is the last node).
    #[error("refused: {0}")]
    Refused(String),
    /// The node answered something else than an acknowledgement.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
}

/// Asks the node at `addr` to leave: it hands every key to its new replicas and stops. The
/// answer comes once the hand-off is complete, however long that takes (the caller bounds
/// the wait).
pub(crate) async fn leave(addr: &str, access: &AdminAccess) -> Result<(), LeaveError> {
    let conn =
        Connection::open_with(addr, access.tls.as_ref(), access.credentials.as_ref()).await?;
    let req = pb::Request {
        id: 1,
        op: Some(pb::request::Op::Admin(pb::Admin {
            op: Some(pb::admin::Op::Leave(pb::Leave { force: false })),
        })),
        ..Default::default()
    };
    let answer = conn.call(req).await;
    conn.abandon();
    match answer?.result {
        Some(pb::response::Result::Ack(_)) => Ok(()),
        Some(pb::response::Result::Error(e)) => Err(LeaveError::Refused(e.message)),
        other => Err(LeaveError::Unexpected(format!("{other:?}"))),
    }
}
