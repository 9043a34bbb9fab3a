//! Errors a request can get. Each maps to one native error code and one RESP error text.

use lattice::LatticeType;
use wire::pb::ErrorCode;

/// An error answered to a client. The node keeps serving after every one of them.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NodeError {
    /// The key holds another lattice type than the operation needs.
    #[error("key holds a {found} value, the operation needs {expected}")]
    WrongType {
        /// What the operation needs (or the type being written).
        expected: String,
        /// What the key holds.
        found: LatticeType,
    },
    /// The key is longer than `max_key_size`.
    #[error("key of {len} bytes exceeds the {max}-byte limit")]
    KeyTooLarge {
        /// Key length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The value (or the merged value) is larger than `max_value_size`.
    #[error("value of {len} bytes exceeds the {max}-byte limit")]
    ValueTooLarge {
        /// Value size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The reply to a request reading several values would be larger than
    /// `max_reply_bytes`: the request is refused as a whole (ask for fewer keys at a time).
    #[error(
        "the reply would exceed the {max}-byte reply limit (limits.max_reply_bytes): \
         ask for fewer keys at a time"
    )]
    ReplyTooLarge {
        /// The limit.
        max: usize,
    },
    /// The worker's share of the memory budget is used up.
    #[error("memory budget exhausted ({used} of {budget} bytes used by this worker)")]
    MemoryLimit {
        /// Bytes used by the worker.
        used: usize,
        /// The worker's budget.
        budget: usize,
    },
    /// The key starts with the reserved metadata prefix.
    #[error("keys starting with the reserved prefix \\x00lkv\\x00 are reserved for metadata")]
    ReservedKey,
    /// A counter would leave the signed 64-bit range.
    #[error("increment or decrement would overflow")]
    Overflow,
    /// This worker holds no replica of the key.
    #[error("this worker holds no replica of the key")]
    Redirect(Vec<String>),
    /// An argument is out of range.
    #[error("{0}")]
    InvalidArgument(String),
    /// The request could not be decoded.
    #[error("{0}")]
    BadRequest(String),
    /// Another worker did not answer.
    #[error("{0}")]
    Unavailable(String),
    /// The node is shutting down.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The node's durable storage refused the write (disk full, read-only, failing);
    /// reads keep working.
    #[error("storage error: {0}")]
    Storage(String),
    /// The connection has not authenticated, or its user or password is wrong.
    #[error("{0}")]
    Unauthenticated(String),
    /// The connection's user lacks a permission or access to a key.
    #[error("{0}")]
    PermissionDenied(String),
    /// An error from another node that ran a forwarded request, passed through.
    #[error("{message}")]
    Remote {
        /// The peer's error code (a `wire::pb::ErrorCode`).
        code: i32,
        /// The peer's message.
        message: String,
    },
}

impl NodeError {
    /// The error answering a refused request.
    pub fn from_auth(e: crate::auth::AuthError) -> Self {
        use crate::auth::AuthError;
        match e {
            AuthError::Required => {
                NodeError::Unauthenticated("authentication required: send Auth first".into())
            }
            AuthError::WrongPassword => NodeError::Unauthenticated(e.to_string()),
            AuthError::Denied { .. } | AuthError::Key { .. } => {
                NodeError::PermissionDenied(e.to_string())
            }
        }
    }

    /// A wrong-type error for an operation needing `expected` on a key holding `found`.
    pub fn wrong_type(expected: impl Into<String>, found: LatticeType) -> Self {
        NodeError::WrongType {
            expected: expected.into(),
            found,
        }
    }

    /// The native protocol's error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            NodeError::WrongType { .. } => ErrorCode::WrongType,
            NodeError::KeyTooLarge { .. } => ErrorCode::KeyTooLarge,
            NodeError::ValueTooLarge { .. } => ErrorCode::ValueTooLarge,
            NodeError::MemoryLimit { .. } => ErrorCode::MemoryLimit,
            NodeError::ReplyTooLarge { .. } => ErrorCode::InvalidArgument,
            NodeError::ReservedKey => ErrorCode::ReservedKey,
            NodeError::Overflow => ErrorCode::Overflow,
            NodeError::Redirect(_) => ErrorCode::Redirect,
            NodeError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            NodeError::BadRequest(_) => ErrorCode::BadRequest,
            NodeError::Unavailable(_) => ErrorCode::Unavailable,
            NodeError::ShuttingDown => ErrorCode::ShuttingDown,
            NodeError::Storage(_) => ErrorCode::Storage,
            NodeError::Unauthenticated(_) => ErrorCode::Unauthenticated,
            NodeError::PermissionDenied(_) => ErrorCode::PermissionDenied,
            NodeError::Remote { code, .. } => {
                ErrorCode::try_from(*code).unwrap_or(ErrorCode::Unavailable)
            }
        }
    }

    /// The native protocol's error message.
    pub fn to_pb(&self) -> wire::pb::Error {
        wire::pb::Error {
            code: self.code() as i32,
            message: self.to_string(),
            redirect: match self {
                NodeError::Redirect(addrs) => addrs.clone(),
                _ => Vec::new(),
            },
        }
    }

    /// The RESP error line (without the leading `-`), using Redis's wording where Redis has
    /// the same error so clients recognise it.
    pub fn resp_message(&self) -> String {
        match self {
            NodeError::WrongType { .. } => format!(
                "WRONGTYPE Operation against a key holding the wrong kind of value ({self})"
            ),
            NodeError::MemoryLimit { .. } => {
                format!("OOM command not allowed when used memory > 'maxmemory' ({self})")
            }
            NodeError::Overflow => "ERR increment or decrement would overflow".to_string(),
            NodeError::ShuttingDown => "SHUTDOWN the node is shutting down".to_string(),
            NodeError::Unavailable(_) => format!("TRYAGAIN {self}"),
            NodeError::Storage(_) => format!("MISCONF {self}"),
            NodeError::Unauthenticated(_) => "NOAUTH Authentication required.".to_string(),
            NodeError::PermissionDenied(_) => format!("NOPERM {self}"),
            NodeError::Remote { message, .. } => match self.code() {
                ErrorCode::WrongType => format!(
                    "WRONGTYPE Operation against a key holding the wrong kind of value ({message})"
                ),
                ErrorCode::MemoryLimit => {
                    format!("OOM command not allowed when used memory > 'maxmemory' ({message})")
                }
                ErrorCode::Unavailable => format!("TRYAGAIN {message}"),
                ErrorCode::ShuttingDown => format!("SHUTDOWN {message}"),
                ErrorCode::Storage => format!("MISCONF {message}"),
                _ => format!("ERR {message}"),
            },
            _ => format!("ERR {self}"),
        }
    }
}
