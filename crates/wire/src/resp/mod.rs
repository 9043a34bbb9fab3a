//! The Redis serialization protocol (RESP2 and RESP3).
//!
//! # Layout
//! - [`parse`]: the server-side command parser ([`CommandParser`], [`parse_command`]), which accepts both the
//!   multibulk form (`*<n>\r\n$<len>\r\n<bytes>\r\n...`) and the inline form (`SET k v\r\n`)
//!   exactly as Redis does, filling a reusable [`Args`] without allocating per command.
//! - [`encode`]: the server-side reply encoder: one function per reply type, appending to a
//!   `Vec<u8>`, each aware of the connection's protocol [`Version`] where RESP2 and RESP3
//!   differ.
//! - [`reply`]: the client-side reply parser ([`parse_reply`], [`skip_reply`]) for every RESP2
//!   and RESP3 type, and the client-side command encoder [`reply::command`].
//!
//! # Error handling
//! Nothing here panics on network input. Parsers separate "need more bytes" (`Ok(None)`,
//! nothing consumed) from a protocol violation ([`ParseError`]); after a violation the
//! connection cannot be resynchronised, so the server replies `-ERR Protocol error: <text>`
//! (see [`ParseError`]'s `Display`) and closes it.

pub mod encode;
pub mod parse;
pub mod reply;

pub use encode::{
    array_header, boolean, bulk, bulk_header, double, error, integer, map_header, null, null_array,
    push_header, set_header, simple, verbatim, Version,
};
pub use parse::{parse_command, Args, ArgsIter, CommandParser, Limits, ParseError};
pub use reply::{parse_reply, skip_reply, Reply, MAX_REPLY_DEPTH};
