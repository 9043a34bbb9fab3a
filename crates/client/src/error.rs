//! Client errors.

use wire::pb::ErrorCode;

/// What can go wrong with a request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Could not connect to an address.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The TLS handshake failed: the server's certificate is not trusted or does not name
    /// the address, or the server does not speak TLS.
    #[error("TLS with {addr} failed: {reason}")]
    Tls {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The connection failed or closed while the request was in flight.
    #[error("connection to {addr} lost: {reason}")]
    ConnectionLost {
        /// The address.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// The server sent something that is not a valid response.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server answered with an error.
    #[error("server error {code:?}: {message}")]
    Server {
        /// The error code.
        code: ErrorCode,
        /// The server's message.
        message: String,
        /// For redirects: where the key lives.
        redirect: Vec<String>,
    },
    /// No response within the request timeout.
    #[error("request timed out")]
    Timeout,
    /// The value read is not of the type the call expects.
    #[error("key holds a {found} value, expected {expected}")]
    UnexpectedType {
        /// What the call expects.
        expected: &'static str,
        /// What the key holds.
        found: lattice::LatticeType,
    },
    /// The call does not fit the session or transaction it was made on (a transaction on a
    /// level without transactions, an operation on a finished transaction).
    #[error("invalid use: {0}")]
    InvalidUse(String),
    /// A session tracks twice its bound of keys because the ones beyond the bound could not
    /// be made stable (replicas unreachable); it accepts operations again once they can.
    #[error("session full: {tracked} keys tracked, bound {max}; replicas unreachable")]
    SessionFull {
        /// Keys tracked.
        tracked: usize,
        /// The session's bound (`SessionOptions::max_keys`).
        max: usize,
    },
}

impl ClientError {
    /// True if retrying the same request may succeed (connection trouble, timeouts, a worker
    /// that is unavailable or shutting down).
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Connect { .. } | ClientError::ConnectionLost { .. } => true,
            ClientError::Timeout => true,
            ClientError::Server { code, .. } => {
                matches!(code, ErrorCode::Unavailable | ErrorCode::ShuttingDown)
            }
            _ => false,
        }
    }

    /// True if the key lives elsewhere and the topology must be refreshed.
    pub fn is_redirect(&self) -> bool {
        matches!(
            self,
            ClientError::Server {
                code: ErrorCode::Redirect,
                ..
            }
        )
    }

    /// The server's error code, if the server answered with an error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Converts a protocol error message into a client error.
    pub fn from_pb(e: wire::pb::Error) -> Self {
        ClientError::Server {
            code: ErrorCode::try_from(e.code).unwrap_or(ErrorCode::Unspecified),
            message: e.message,
            redirect: e.redirect,
        }
    }
}
