//! The peer target: what arrives on a node's peer port, from a node that may be forged.
//!
//! Input: a script of steps, each chosen by one byte, until the input ends: a `PeerHello`;
//! a `PeerRequest` for one of the node's two workers (`Replicate`, `Forward`, `Digest`,
//! `RepairMore`, `Fetch`, `CheckTombstones`, `Reclaim`) or for its agent (`SyncCluster`); a
//! `PeerResponse` answering a request the node's workers sent to another node; a failure
//! of such a request; time passing; a client write; an agent round. Messages are protobuf
//! bytes as they arrive on the wire.
//!
//! The node is real code in memory: two replica cores ([`node::core::Core`]) of node
//! `fuzz`, routing by the views its cluster agent ([`node::fuzzing::Agent`]) publishes,
//! which starts knowing one other member, `other`. The harness carries out the cores'
//! effects as the driver would: messages between the two workers directly, messages to
//! other nodes encoded as on the wire and answered by the script (or never).
//!
//! Checks:
//! - a hello is accepted exactly when its proof is the HMAC of its fields under the
//!   cluster secret and its time is within the allowed skew; one signed by the node's own
//!   code is accepted, one with its proof changed is not;
//! - every request and answer that decodes re-encodes to the same message, and what the
//!   cores send to other nodes decodes back to what they sent;
//! - the cores' journal entries encode and decode back to themselves;
//! - the replication table peers gossip stays within `max_replication_entries`;
//! - nothing panics: decoding, the cores' handling of requests and answers, the agent's
//!   merge of memberships and replication tables, the views built from them and the
//!   cores' switch to them.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use node::ack::Ack;
use node::clock::{Clock, ManualClock};
use node::codec::{decode_journal, encode_journal};
use node::core::{Core, Effect, PeerFailure, PeerMsg, PeerResult, ReqId, Routing, Token};
use node::error::NodeError;
use node::fuzzing::{self, Agent, START_MS};
use node::op::{Condition, Op};
use node::peer::convert::{
    incoming_from_pb, request_from_pb, request_to_pb, response_from_pb, response_to_pb, Incoming,
};
use node::peer::secret::{self, MAX_HELLO_SKEW_MS};
use node::view::ViewState;
use placement::{node_key, Replica};
use prost::Message;
use wire::pb;

use crate::input::Input;

/// The cluster secret of the node under test.
pub const SECRET: &str = "fuzz-secret";

/// The other member the node's agent knows at the start.
pub const OTHER: &str = "other";

/// Most requests to other nodes left unanswered at once (older ones time out).
const MAX_PENDING: usize = 256;

/// Most rounds of effects carried out after one step.
const MAX_ROUNDS: usize = 64;

/// Where the answer to a request given to a core goes.
enum Asker {
    /// The other worker of this node: its request.
    Local { core: usize, req: ReqId },
    /// Another node: the id of its `PeerRequest`.
    Remote { id: u64 },
}

struct Harness {
    cores: Vec<Core>,
    clock: Arc<ManualClock>,
    agent: Agent,
    view: Arc<ViewState>,
    askers: HashMap<u64, Asker>,
    next_token: u64,
    /// Requests sent to other nodes, unanswered: (core, request).
    pending: Vec<(usize, ReqId)>,
}

/// The member `other` as its agent would describe itself.
fn other_member(now_ms: u64) -> pb::Member {
    pb::Member {
        node_id: OTHER.into(),
        incarnation: now_ms,
        status: pb::NodeStatus::Alive as i32,
        heartbeat: 1,
        role: "memory".into(),
        front: "other:7700".into(),
        resp: "other:6380".into(),
        workers: vec!["other:7701".into(), "other:7702".into()],
        vnodes: 16,
        peer: "other:17700".into(),
        placement: placement::PLACEMENT_HASH_TAGS,
    }
}

impl Harness {
    fn new() -> Harness {
        let mut agent = Agent::new();
        let join = pb::ClusterState {
            members: vec![other_member(agent.now_ms())],
            ..Default::default()
        };
        agent.on_sync(&join);
        let view = agent.view();
        let clock = Arc::new(ManualClock::new(START_MS));
        let cores = fuzzing::cores(2, view.clone(), clock.clone());
        Harness {
            cores,
            clock,
            agent,
            view,
            askers: HashMap::new(),
            next_token: 0,
            pending: Vec::new(),
        }
    }

    /// Switches the cores to the agent's view if it changed.
    fn follow_agent(&mut self) {
        let view = self.agent.view();
        assert!(
            view.replication.stored() <= fuzzing::AGENT_MAX_REPLICATION_ENTRIES,
            "peers grew the replication table to {} entries, over the limit",
            view.replication.stored()
        );
        if !Arc::ptr_eq(&view, &self.view) {
            self.view = view.clone();
            for c in &mut self.cores {
                c.set_view(view.clone());
            }
        }
    }

    fn token(&mut self, asker: Asker) -> Token {
        self.next_token += 1;
        self.askers.insert(self.next_token, asker);
        Token(self.next_token)
    }

    /// Carries out the cores' effects until there are none (or [`MAX_ROUNDS`]).
    fn pump(&mut self) {
        let me = self.cores[0].me().node;
        for _ in 0..MAX_ROUNDS {
            let mut any = false;
            for i in 0..self.cores.len() {
                let effects = self.cores[i].take_effects();
                any |= !effects.is_empty();
                for e in effects {
                    self.effect(me, i, e);
                }
            }
            if !any {
                return;
            }
        }
    }

    fn effect(&mut self, me: u64, i: usize, e: Effect) {
        match e {
            Effect::Send { req, to, msg, .. } => {
                let local = to.node == me && (to.worker as usize) < self.cores.len();
                if local {
                    let from = self.cores[i].me();
                    let token = self.token(Asker::Local { core: i, req });
                    self.cores[to.worker as usize].on_peer(from, msg, token);
                } else {
                    check_request_round_trip(req.0, &msg);
                    self.pending.push((i, req));
                    if self.pending.len() > MAX_PENDING {
                        let (core, req) = self.pending.remove(0);
                        self.cores[core].on_reply(req, Err(PeerFailure::TimedOut));
                    }
                }
            }
            Effect::Respond { token, result } => match self.askers.remove(&token.0) {
                Some(Asker::Local { core, req }) => {
                    self.cores[core].on_reply(req, result.map_err(PeerFailure::Refused));
                }
                Some(Asker::Remote { id }) => {
                    let resp = response_to_pb(id, result.clone());
                    let back = pb::PeerResponse::decode(&resp.encode_to_vec()[..])
                        .expect("an answer decodes");
                    let (back_id, back_result) = response_from_pb(back);
                    assert_eq!(back_id, id, "an answer's id");
                    assert_eq!(
                        result.is_ok(),
                        back_result.is_ok(),
                        "an answer's outcome changed on the wire"
                    );
                }
                None => panic!("an answer to a request nobody asked"),
            },
            // The fuzzed cores have no backing store.
            Effect::BackingApply { .. } | Effect::BackingFetch { .. } => {}
            Effect::Journal(payloads) => {
                // Each payload, encoded as the changes happened, decodes and encodes back
                // to the same bytes through the protobuf messages.
                for encoded in payloads {
                    let back = decode_journal(&encoded).expect("journal entries decode");
                    assert_eq!(
                        encode_journal(&back),
                        encoded,
                        "journal entries changed when decoded"
                    );
                }
            }
            Effect::Sync { id, strict } => {
                let result = if strict {
                    Err(NodeError::Storage("no durable storage".into()))
                } else {
                    Ok(())
                };
                self.cores[i].on_synced(id, result);
            }
            Effect::Complete { .. } | Effect::Unreachable { .. } => {}
        }
    }

    fn tick(&mut self, ms: u64) {
        self.clock.advance(ms);
        for c in &mut self.cores {
            c.tick();
        }
    }
}

/// What a core sends to another node survives the wire.
fn check_request_round_trip(id: u64, msg: &PeerMsg) {
    let sent = request_to_pb(id, msg.clone()).encode_to_vec();
    let req = pb::PeerRequest::decode(&sent[..]).expect("a request decodes");
    let (back_id, back) = request_from_pb(req).expect("a request a core sent is valid");
    assert_eq!(back_id, id);
    assert_eq!(
        request_to_pb(id, back).encode_to_vec(),
        sent,
        "a request changed on the wire"
    );
}

/// A replica of another node: `other`'s workers mostly, any node sometimes.
fn remote(inp: &mut Input<'_>) -> Replica {
    let b = inp.u8();
    let node = if b & 0x80 == 0 {
        node_key(OTHER)
    } else {
        inp.u64()
    };
    Replica {
        node,
        worker: u32::from(b & 3),
    }
}

/// The peer target (see the module docs).
pub fn peer(data: &[u8]) {
    let mut inp = Input::new(data);
    let mut h = Harness::new();
    let mut steps = 0;
    while !inp.is_empty() && steps < 64 {
        steps += 1;
        match inp.u8() % 8 {
            0 => hello(&mut inp, h.clock.wall_ms()),
            1 => {
                let body = inp.chunk(8192);
                let core = usize::from(inp.u8()) % h.cores.len();
                let from = remote(&mut inp);
                if let Ok(req) = pb::PeerRequest::decode(body) {
                    request(&mut h, req, core, from);
                }
            }
            2 => {
                let body = inp.chunk(8192);
                let pick = usize::from(inp.u8());
                if let Ok(resp) = pb::PeerResponse::decode(body) {
                    check_response_round_trip(&resp);
                    let (_, result) = response_from_pb(resp);
                    answer(&mut h, pick, result);
                }
            }
            3 => {
                let pick = usize::from(inp.u8());
                let why = if pick & 1 == 0 {
                    PeerFailure::TimedOut
                } else {
                    PeerFailure::Unreachable("refused".into())
                };
                answer(&mut h, pick >> 1, Err(why));
            }
            4 => {
                let ms = u64::from(inp.u16());
                h.tick(ms);
            }
            5 => client(&mut h, &mut inp),
            6 => {
                let ms = u64::from(inp.u32() % 600_000);
                h.agent.round(ms);
                h.follow_agent();
            }
            _ => {
                // A cluster exchange made by the harness: members and replication entries
                // as fuzz bytes, wrapped so they reach the merge.
                let members = inp.chunk(4096);
                if let Ok(state) = pb::ClusterState::decode(members) {
                    sync(&mut h, &state);
                }
            }
        }
        h.pump();
    }
    // Time runs out for everything still waiting.
    for _ in 0..8 {
        h.tick(10_000);
        h.pump();
    }
}

/// Answers the `pick`-th pending request to another node.
fn answer(h: &mut Harness, pick: usize, result: PeerResult) {
    if h.pending.is_empty() {
        return;
    }
    let (core, req) = h.pending.remove(pick % h.pending.len());
    h.cores[core].on_reply(req, result);
}

/// A `PeerRequest` from `from` for worker `core` (or for the agent).
fn request(h: &mut Harness, req: pb::PeerRequest, core: usize, from: Replica) {
    let encoded = req.encode_to_vec();
    let again = pb::PeerRequest::decode(&encoded[..]).expect("a re-encoded request decodes");
    assert_eq!(
        again.encode_to_vec(),
        encoded,
        "a request re-encoded differs"
    );
    match incoming_from_pb(req) {
        Ok((id, Incoming::Worker(msg))) => {
            check_request_round_trip(id, &msg);
            let token = h.token(Asker::Remote { id });
            h.cores[core].on_peer(from, msg, token);
        }
        Ok((_, Incoming::SyncCluster(state))) => sync(h, &state),
        Err(_) => {}
    }
}

/// A `SyncCluster` exchange: the agent merges it and answers.
fn sync(h: &mut Harness, state: &pb::ClusterState) {
    let answer = h.agent.on_sync(state);
    let encoded = answer.encode_to_vec();
    let back = pb::ClusterState::decode(&encoded[..]).expect("the agent's answer decodes");
    assert_eq!(back, answer, "the agent's answer changed on the wire");
    h.follow_agent();
}

fn check_response_round_trip(resp: &pb::PeerResponse) {
    let encoded = resp.encode_to_vec();
    let again = pb::PeerResponse::decode(&encoded[..]).expect("a re-encoded answer decodes");
    assert_eq!(
        again.encode_to_vec(),
        encoded,
        "an answer re-encoded differs"
    );
}

/// A hello, as fuzz bytes and as the node's own code signs one.
fn hello(inp: &mut Input<'_>, now_ms: u64) {
    let body = inp.chunk(1024);
    if let Ok(hello) = pb::PeerHello::decode(body) {
        let mut signed = hello.clone();
        secret::sign(&mut signed, Some(SECRET), hello.sent_ms);
        let valid =
            hello.proof == signed.proof && now_ms.abs_diff(hello.sent_ms) <= MAX_HELLO_SKEW_MS;
        assert_eq!(
            secret::verify(&hello, Some(SECRET), now_ms).is_ok(),
            valid,
            "a hello's proof was judged wrongly"
        );
        assert!(
            secret::verify(&hello, None, now_ms).is_ok(),
            "no secret: any hello"
        );
        // Signed now by the node's code: accepted; with its proof changed: refused.
        let mut ours = hello;
        secret::sign(&mut ours, Some(SECRET), now_ms);
        assert_eq!(secret::verify(&ours, Some(SECRET), now_ms), Ok(()));
        let mut proof = ours.proof.to_vec();
        let i = usize::from(inp.u8()) % proof.len().max(1);
        if let Some(b) = proof.get_mut(i) {
            *b ^= inp.u8() | 1;
        }
        ours.proof = proof.into();
        assert!(secret::verify(&ours, Some(SECRET), now_ms).is_err());
        let mut other = ours;
        secret::sign(&mut other, Some("another secret"), now_ms);
        assert!(secret::verify(&other, Some(SECRET), now_ms).is_err());
    }
}

/// A client request on one of the workers, so the peers' requests find data.
fn client(h: &mut Harness, inp: &mut Input<'_>) {
    let core = usize::from(inp.u8()) % h.cores.len();
    let kind = inp.u8();
    let key = Bytes::copy_from_slice(inp.chunk(16));
    let op = match kind % 4 {
        0 => Op::Assign {
            key,
            value: Bytes::copy_from_slice(inp.chunk(32)),
            condition: Condition::Always,
        },
        1 => Op::Delete { key },
        2 => Op::SetAdd {
            key,
            members: vec![Bytes::copy_from_slice(inp.chunk(8))],
        },
        _ => Op::Get { key },
    };
    let ack = Ack {
        replicas: usize::from(kind >> 6),
        durable: false,
        quiet: false,
    };
    let _ = h.cores[core].submit(vec![op], ack, Routing::Forward);
}
