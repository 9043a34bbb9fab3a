//! [`BenchError`]: everything that stops a benchmark run.

/// Why a benchmark could not run or was stopped.
///
/// Error *replies* from the server (a `-ERR` in RESP, an `Error` response in the native
/// protocol) are not failures: they are counted in [`Report::errors`](crate::Report::errors).
/// A lost connection or an unreadable reply is a failure, because the operations in flight on
/// that connection can no longer be accounted for.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The flags make no sense together (or one is out of range).
    #[error("invalid arguments: {0}")]
    Config(String),
    /// A connection could not be opened.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address dialled.
        addr: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// An open connection failed (reset, closed by the server, write error).
    #[error("connection to {addr} failed: {reason}")]
    Connection {
        /// The server address of the connection.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// The server sent something that is not a valid reply to what was asked.
    #[error("protocol error from {addr}: {reason}")]
    Protocol {
        /// The server address of the connection.
        addr: String,
        /// What was wrong.
        reason: String,
    },
    /// The native protocol's topology could not be fetched from the front port.
    #[error("fetching the node's topology: {0}")]
    Topology(#[from] client::ClientError),
    /// Some writes of the load phase got error replies (the keys are not all loaded).
    #[error("load phase: {errors} of {keys} writes failed (first error: {first})")]
    Load {
        /// Writes that got an error reply.
        errors: u64,
        /// Keys the load phase wrote.
        keys: u64,
        /// The first error reply, as text.
        first: String,
    },
    /// A load-generator thread could not start or died.
    #[error("load-generator thread: {0}")]
    Thread(String),
}
