//! Pub/sub on the RESP port: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE,
//! SUNSUBSCRIBE, PUBLISH, SPUBLISH, PUBSUB, RESET — and the subscribed mode of a RESP2
//! connection (only the (P|S)SUBSCRIBE family, PING, QUIT and RESET; PING answers
//! `*2 pong <arg>`). A RESP3 connection keeps running every command while subscribed;
//! its messages arrive as `>` pushes between replies.
//!
//! The node-wide registry and the relay to other nodes are [`crate::pubsub`]; this module
//! is a connection's view: its queue of messages, encoded for its protocol version when
//! written. See docs/protocol.md "Pub/sub".

use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use wire::resp::{self, Version};

use super::commands::{arity_error, Cmd, Plan};
use super::reply::{err, ready};
use super::ConnState;
use crate::auth::{Permission, User};
use crate::driver::worker::Worker;
use crate::front::pipeline::Replies;
use crate::pubsub::{Gauge, Hub, Kind, Push};

/// A connection's registration with its node's hub, made at its first subscription.
struct Registered {
    hub: Arc<Hub>,
    id: u64,
    rx: mpsc::Receiver<Push>,
    gauge: Arc<Gauge>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.hub.close(self.id);
    }
}

/// A connection's subscriptions.
#[derive(Default)]
pub struct ConnSubscriptions {
    reg: Option<Registered>,
    /// Channels + patterns + shard channels subscribed (RESP2's subscribed mode while > 0).
    active: usize,
    /// Channels, patterns and shard channels, counted apart (`CLIENT LIST`).
    counts: [usize; 3],
}

impl std::fmt::Debug for ConnSubscriptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnSubscriptions")
            .field("active", &self.active)
            .finish_non_exhaustive()
    }
}

impl ConnSubscriptions {
    /// True while the connection has a subscription.
    pub fn any(&self) -> bool {
        self.active > 0
    }

    /// How many channels, patterns and shard channels are subscribed (`CLIENT LIST`).
    pub fn count(&self) -> usize {
        self.active
    }

    /// Channels, patterns and shard channels subscribed, counted apart (`CLIENT LIST`'s
    /// `sub`, `psub` and `ssub`).
    pub fn counts(&self) -> [usize; 3] {
        self.counts
    }

    /// True once the connection was disconnected for falling behind.
    pub fn killed(&self) -> bool {
        self.reg.as_ref().is_some_and(|r| r.gauge.killed())
    }

    /// Waits until the connection is disconnected for falling behind (forever if it never
    /// subscribed).
    pub async fn wait_killed(&self) {
        match &self.reg {
            Some(r) => r.gauge.wait_killed().await,
            None => std::future::pending().await,
        }
    }

    /// Waits for the next message, encoded for `v` (empty once disconnected).
    pub async fn next_push(&mut self, v: Version) -> Vec<u8> {
        let Some(r) = &mut self.reg else {
            return std::future::pending().await;
        };
        let gauge = r.gauge.clone();
        tokio::select! {
            push = r.rx.recv() => match push {
                Some(p) => {
                    r.gauge.taken(&p);
                    let mut out = Vec::new();
                    encode_push(&mut out, &p, v);
                    out
                }
                None => std::future::pending().await,
            },
            _ = gauge.wait_killed() => Vec::new(),
        }
    }

    /// Appends every message waiting now, encoded for `v`.
    pub fn drain(&mut self, out: &mut Vec<u8>, v: Version) {
        if let Some(r) = &mut self.reg {
            while let Ok(p) = r.rx.try_recv() {
                r.gauge.taken(&p);
                encode_push(out, &p, v);
            }
        }
    }

    fn registered(&mut self, w: &Worker) -> &Registered {
        self.reg.get_or_insert_with(|| {
            let hub = w.shared.pubsub.clone();
            let (id, rx, gauge) = hub.register();
            Registered { hub, id, rx, gauge }
        })
    }

    fn recount(&mut self) {
        self.counts = match &self.reg {
            Some(r) => r.hub.counts(r.id),
            None => [0; 3],
        };
        self.active = self.counts.iter().sum();
    }
}

fn encode_push(out: &mut Vec<u8>, p: &Push, v: Version) {
    match (&p.pattern, p.sharded) {
        (Some(pattern), _) => {
            resp::push_header(out, 4, v);
            resp::bulk(out, b"pmessage");
            resp::bulk(out, pattern);
        }
        (None, true) => {
            resp::push_header(out, 3, v);
            resp::bulk(out, b"smessage");
        }
        (None, false) => {
            resp::push_header(out, 3, v);
            resp::bulk(out, b"message");
        }
    }
    resp::bulk(out, &p.channel);
    resp::bulk(out, &p.data);
}

/// The commands a RESP2 connection may send while subscribed.
const ALLOWED_SUBSCRIBED: &[&str] = &[
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "ping",
    "quit",
    "reset",
];

/// This family's commands and their Redis arities (COMMAND's entries are in `server`).
pub(super) const COMMANDS: &[(&str, i64)] = &[
    ("subscribe", -2),
    ("unsubscribe", -1),
    ("psubscribe", -2),
    ("punsubscribe", -1),
    ("ssubscribe", -2),
    ("sunsubscribe", -1),
    ("publish", 3),
    ("spublish", 3),
    ("pubsub", -2),
    ("reset", 1),
];

/// Handles `cmd` if it is a pub/sub command, or if the connection is in RESP2's subscribed
/// mode (where other commands are refused); returns false to let it run as usual.
pub(super) fn intercept(
    w: &Rc<Worker>,
    state: &mut ConnState,
    cmd: &Cmd<'_>,
    user: Option<&User>,
    replies: &mut Replies,
) -> bool {
    let ours = COMMANDS
        .iter()
        .find(|c| cmd.arg(0).eq_ignore_ascii_case(c.0.as_bytes()));
    if ours.is_none() && !state.pubsub.any() {
        return false;
    }
    let name = cmd.name_lower();
    let subscribed = state.pubsub.any() && state.version == Version::Resp2;
    let v = state.version;
    let wrong_arity = |arity: i64| {
        let argc = cmd.len() as i64;
        (arity >= 0 && argc != arity) || argc < -arity
    };
    let reply = if subscribed && name == "ping" {
        match cmd.len() {
            1 | 2 => ready(|o| {
                resp::array_header(o, 2);
                resp::bulk(o, b"pong");
                resp::bulk(o, if cmd.len() == 2 { cmd.arg(1) } else { b"" });
            }),
            _ => arity_error(cmd),
        }
    } else if subscribed && !ALLOWED_SUBSCRIBED.contains(&name.as_str()) {
        // Unknown commands and wrong arities are reported first, as Redis checks them
        // before the context.
        match ours.map(|c| c.1).or_else(|| super::server::arity(&name)) {
            // Not in COMMAND's table: ask the planner whether it knows the command.
            None => match super::commands::plan(cmd, state) {
                Plan::Reply(r)
                    if r.starts_with(b"-ERR unknown command")
                        || r.starts_with(b"-ERR wrong number of arguments") =>
                {
                    return false
                }
                _ => context_error(&name),
            },
            Some(a) if wrong_arity(a) && ours.is_none() => return false,
            Some(a) if wrong_arity(a) => arity_error(cmd),
            Some(_) => context_error(&name),
        }
    } else {
        let Some(&(_, arity)) = ours else {
            return false;
        };
        if wrong_arity(arity) {
            arity_error(cmd)
        } else if let Some(e) = refused(&name, user) {
            e
        } else if state.txn.in_multi() && name != "reset" {
            // Redis 7.0 queues them; running them at EXEC is not supported here.
            state.txn.abort();
            err("ERR Command not allowed inside a transaction")
        } else {
            run(w, state, &name, cmd, v)
        }
    };
    replies.emit(|o| o.extend_from_slice(&reply));
    true
}

/// Redis's reply to a command a RESP2 connection may not run while subscribed.
fn context_error(name: &str) -> Vec<u8> {
    err(&format!(
        "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
         RESET are allowed in this context"
    ))
}

/// The permission check: subscribing and PUBSUB need `read`, publishing `write` (channels
/// are not keys: the user's key patterns do not apply).
fn refused(name: &str, user: Option<&User>) -> Option<Vec<u8>> {
    let user = user?;
    let need = match name {
        "publish" | "spublish" => Permission::Write,
        "reset" => return None,
        _ => Permission::Read,
    };
    user.check(need, []).err().map(|_| {
        err(&format!(
            "NOPERM User {} has no permissions to run the '{name}' command",
            user.name()
        ))
    })
}

fn run(w: &Rc<Worker>, state: &mut ConnState, name: &str, cmd: &Cmd<'_>, v: Version) -> Vec<u8> {
    let args: Vec<Bytes> = (1..cmd.len())
        .map(|i| Bytes::copy_from_slice(cmd.arg(i)))
        .collect();
    match name {
        "subscribe" => subscribe(w, state, Kind::Channel, &args, v),
        "psubscribe" => subscribe(w, state, Kind::Pattern, &args, v),
        "ssubscribe" => subscribe(w, state, Kind::Shard, &args, v),
        "unsubscribe" => unsubscribe(state, Kind::Channel, &args, v),
        "punsubscribe" => unsubscribe(state, Kind::Pattern, &args, v),
        "sunsubscribe" => unsubscribe(state, Kind::Shard, &args, v),
        "publish" | "spublish" => {
            let sharded = name == "spublish";
            let n = w.shared.pubsub.publish(&args[0], &args[1], sharded);
            crate::pubsub::relay::publish(w, &args[0], &args[1], sharded);
            // A RESP3 connection subscribed to its own message gets it before the reply,
            // as from Redis (so do the others queued for it by then).
            let mut out = Vec::new();
            state.pubsub.drain(&mut out, v);
            resp::integer(&mut out, n as i64);
            out
        }
        "pubsub" => pubsub(&w.shared.pubsub, cmd, &args, v),
        _ => reset(state),
    }
}

fn kind_names(kind: Kind) -> (&'static [u8], &'static [u8]) {
    match kind {
        Kind::Channel => (b"subscribe", b"unsubscribe"),
        Kind::Pattern => (b"psubscribe", b"punsubscribe"),
        Kind::Shard => (b"ssubscribe", b"sunsubscribe"),
    }
}

fn subscribe(
    w: &Worker,
    state: &mut ConnState,
    kind: Kind,
    names: &[Bytes],
    v: Version,
) -> Vec<u8> {
    let subs = &mut state.pubsub;
    let (id, hub) = {
        let r = subs.registered(w);
        (r.id, r.hub.clone())
    };
    let mut out = Vec::new();
    for name in names {
        match hub.subscribe(id, kind, name) {
            Ok(count) => {
                resp::push_header(&mut out, 3, v);
                resp::bulk(&mut out, kind_names(kind).0);
                resp::bulk(&mut out, name);
                resp::integer(&mut out, count as i64);
            }
            Err(e) => {
                resp::error(&mut out, &e.to_string());
                break;
            }
        }
    }
    subs.recount();
    out
}

fn unsubscribe(state: &mut ConnState, kind: Kind, names: &[Bytes], v: Version) -> Vec<u8> {
    let subs = &mut state.pubsub;
    let mut out = Vec::new();
    let confirm = |out: &mut Vec<u8>, name: Option<&[u8]>, count: usize| {
        resp::push_header(out, 3, v);
        resp::bulk(out, kind_names(kind).1);
        match name {
            Some(n) => resp::bulk(out, n),
            None => resp::null(out, v),
        }
        resp::integer(out, count as i64);
    };
    let Some(r) = &subs.reg else {
        confirm(&mut out, None, 0);
        return out;
    };
    let names = if names.is_empty() {
        r.hub.names(r.id, kind)
    } else {
        names.to_vec()
    };
    if names.is_empty() {
        confirm(&mut out, None, r.hub.count(r.id, kind));
    }
    for name in &names {
        let count = r.hub.unsubscribe(r.id, kind, name);
        confirm(&mut out, Some(name), count);
    }
    subs.recount();
    out
}

fn pubsub(hub: &Hub, cmd: &Cmd<'_>, args: &[Bytes], v: Version) -> Vec<u8> {
    let sub = String::from_utf8_lossy(&args[0]).to_lowercase();
    let wrong = || {
        err(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(cmd.arg(1))
        ))
    };
    match sub.as_str() {
        "channels" | "shardchannels" => {
            if args.len() > 2 {
                return wrong();
            }
            let channels = hub.channels(args.get(1).map(|p| &p[..]), sub == "shardchannels");
            ready(|o| {
                resp::array_header(o, channels.len());
                for c in &channels {
                    resp::bulk(o, c);
                }
            })
        }
        "numsub" | "shardnumsub" => {
            let sharded = sub == "shardnumsub";
            ready(|o| {
                resp::map_header(o, args.len() - 1, Version::Resp2);
                for c in &args[1..] {
                    resp::bulk(o, c);
                    resp::integer(o, hub.numsub(c, sharded) as i64);
                }
            })
        }
        "numpat" => {
            if args.len() != 1 {
                // NUMPAT's arity is checked as a command's (CHANNELS' by PUBSUB itself).
                return err("ERR wrong number of arguments for 'pubsub|numpat' command");
            }
            ready(|o| resp::integer(o, hub.numpat() as i64))
        }
        "help" => ready(|o| {
            let lines: &[&str] = &[
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
                "SHARDCHANNELS [<pattern>]",
                "    Return the currently active shard level channels matching a <pattern> (default: '*').",
                "SHARDNUMSUB [<shardchannel> ...]",
                "    Return the number of subscribers for the specified shard level channel(s)",
                "HELP",
                "    Prints this help.",
            ];
            let _ = v;
            resp::array_header(o, lines.len());
            for l in lines {
                resp::simple(o, l);
            }
        }),
        _ => err(&format!(
            "ERR unknown subcommand '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(cmd.arg(1))
        )),
    }
}

/// RESET: ends the transaction, the watches and every subscription, goes back to RESP2,
/// forgets the name and logs in again as the initial user (none on a node with users).
fn reset(state: &mut ConnState) -> Vec<u8> {
    state.txn = Default::default();
    state.pubsub = ConnSubscriptions::default();
    state.version = Version::Resp2;
    state.name = None;
    state.user = state.users.initial();
    ready(|o| resp::simple(o, "RESET"))
}
