//! What replicas say to each other: the requests one worker sends another — of the same
//! node through the in-process mesh, of another node over the peer plane — and their
//! answers. The peer plane carries them as `PeerRequest` / `PeerResponse` protobuf messages
//! (`crate::peer::convert`); inside a node they travel as they are.

use bytes::Bytes;
use lattice::Timestamp;

use crate::ack::Ack;
use crate::codec::GossipBatch;
use crate::error::NodeError;
use crate::op::{Op, OpResult};

pub use crate::shard::RepairCursor;

/// A request from one worker to another.
#[derive(Clone, Debug, PartialEq)]
pub enum PeerMsg {
    /// Merge these records (gossip, hand-off, anti-entropy, fan-out of a write). With
    /// `durable`, answer only once they are as durable as the receiver's storage allows.
    Replicate {
        /// The records.
        entries: GossipBatch,
        /// Answer once durable.
        durable: bool,
    },
    /// Run these ops here (a client request forwarded by another worker) and answer with
    /// their results once each write has the acknowledgement `ack` asks for.
    Forward {
        /// The ops.
        ops: Vec<Op<Bytes>>,
        /// The acknowledgement.
        ack: Ack,
    },
    /// Anti-entropy: the sender's digests of buckets `first ..` (one per bucket) over the
    /// keys it shares with the receiver. The answer is a [`PeerReply::Repair`].
    Digest {
        /// The first bucket.
        first: u32,
        /// One digest per bucket.
        digests: Vec<u64>,
    },
    /// Anti-entropy: more of the receiver's entries in `buckets`, from `cursor`.
    RepairMore {
        /// The buckets whose digests differed.
        buckets: Vec<u32>,
        /// Where the previous answer stopped.
        cursor: RepairCursor,
    },
    /// The receiver's records of these keys (replica or not).
    Fetch {
        /// The keys.
        keys: Vec<Bytes>,
    },
    /// Tombstone reclamation, first phase: does the receiver hold each key at an epoch at
    /// least the given one? The answer is a [`PeerReply::Covered`].
    CheckTombstones {
        /// (key, tombstone epoch).
        entries: Vec<(Bytes, Timestamp)>,
    },
    /// Tombstone reclamation, second phase: remove each key of `entries` if it holds
    /// exactly a tombstone at the given epoch; stop holding back those of `released` (not
    /// every replica had them).
    Reclaim {
        /// (key, tombstone epoch) to remove.
        entries: Vec<(Bytes, Timestamp)>,
        /// (key, tombstone epoch) no longer retiring.
        released: Vec<(Bytes, Timestamp)>,
    },
}

impl PeerMsg {
    /// A short name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            PeerMsg::Replicate { .. } => "replicate",
            PeerMsg::Forward { .. } => "forward",
            PeerMsg::Digest { .. } => "digest",
            PeerMsg::RepairMore { .. } => "repair-more",
            PeerMsg::Fetch { .. } => "fetch",
            PeerMsg::CheckTombstones { .. } => "check-tombstones",
            PeerMsg::Reclaim { .. } => "reclaim",
        }
    }
}

/// The answer to a [`PeerMsg`].
#[derive(Clone, Debug, PartialEq)]
pub enum PeerReply {
    /// Done; a count (entries merged, keys removed).
    Ack(u64),
    /// A forward's results, one per op.
    Results(Vec<OpResult>),
    /// Anti-entropy: the buckets whose digests differ, the receiver's entries in them (a
    /// bounded part), and where to continue if there are more.
    Repair {
        /// The differing buckets.
        differing: Vec<u32>,
        /// Entries of those buckets.
        entries: GossipBatch,
        /// Where to continue (`RepairMore`), if the answer is not complete.
        next: Option<RepairCursor>,
    },
    /// Records of the keys asked for (those found).
    Records(GossipBatch),
    /// Tombstone reclamation: per key, whether the receiver holds it at the epoch or later.
    Covered(Vec<bool>),
}

/// Why a request to another worker got no answer.
#[derive(Clone, Debug, PartialEq)]
pub enum PeerFailure {
    /// It could not be sent (no connection, the worker is gone): it certainly did not run.
    Unreachable(String),
    /// No answer in time: it may or may not have run.
    TimedOut,
    /// The receiver answered with an error.
    Refused(NodeError),
}

impl PeerFailure {
    /// The error a client sees for it.
    pub fn to_error(&self, what: &str) -> NodeError {
        match self {
            PeerFailure::Unreachable(why) => {
                NodeError::Unavailable(format!("{what}: cannot reach the replica: {why}"))
            }
            PeerFailure::TimedOut => {
                NodeError::Unavailable(format!("{what}: the replica did not answer in time"))
            }
            PeerFailure::Refused(e) => e.clone(),
        }
    }
}

/// The outcome of a request to another worker.
pub type PeerResult = Result<PeerReply, PeerFailure>;
