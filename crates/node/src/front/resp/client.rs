//! `CLIENT` subcommands: SETNAME, GETNAME, ID, SETINFO, LIST, INFO, KILL, NO-EVICT,
//! NO-TOUCH. LIST and KILL reach every RESP connection of the node, on every worker,
//! through its registry ([`crate::clients`]); see docs/protocol.md, "Keys and server".

use std::sync::Arc;
use std::time::Instant;

use wire::resp::{self, Version};

use super::commands::{arity_error, parse_i64, syntax_error, Cmd};
use super::reply::{err, ready};
use super::ConnState;
use crate::clients::{Client, ClientInfo};

/// Commands whose `CLIENT LIST` name includes the subcommand (`client|list`).
const CONTAINERS: [&[u8]; 9] = [
    b"CLIENT",
    b"CONFIG",
    b"COMMAND",
    b"OBJECT",
    b"MEMORY",
    b"ACL",
    b"PUBSUB",
    b"SCRIPT",
    b"FUNCTION",
];

/// Notes `cmd` as the connection's last command, in the connection's own state: no lock
/// and no clock on the request path. [`publish`] copies it to the node's registry once per
/// pipelined batch (and at once after a `CLIENT` command, which reads the registry).
pub(super) fn ran(state: &mut ConnState, cmd: &Cmd<'_>) {
    state.unpublished = true;
    let first = cmd.arg(0);
    let container = CONTAINERS.iter().any(|c| first.eq_ignore_ascii_case(c));
    let name = &mut state.last_cmd;
    // The same command as the last (the usual case): nothing to rebuild or copy.
    let same = !(container && cmd.len() > 1)
        && name.len() == first.len()
        && name.as_bytes().eq_ignore_ascii_case(first);
    if !same {
        name.clear();
        push_lower(name, first);
        if cmd.len() > 1 && container {
            name.push('|');
            push_lower(name, cmd.arg(1));
        }
        state.shown.stale = true;
    }
    if first.eq_ignore_ascii_case(b"CLIENT") {
        publish(state, Instant::now());
    }
}

/// What the registry was last given of a connection, kept in the connection's state so a
/// batch that changed none of it costs no lock and no comparison with the registry's copy.
#[derive(Debug, Default)]
pub struct Shown {
    /// The last command's name changed since (or nothing was given yet).
    stale: bool,
    name: Option<Vec<u8>>,
    resp: u8,
    user: Option<Arc<crate::auth::User>>,
    multi: Option<usize>,
    subscriptions: (usize, [usize; 3]),
}

impl Shown {
    /// True if the registry's copy of `state` is out of date (beyond the time of its last
    /// command, which is stored apart).
    fn differs(&self, state: &ConnState) -> bool {
        self.stale
            || self.resp != resp_of(state)
            || self.multi != state.txn.queued()
            || self.subscriptions != subscriptions_of(state)
            || self.name != state.name
            || match (&self.user, &state.user) {
                (None, None) => false,
                (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
                _ => true,
            }
    }
}

fn subscriptions_of(state: &ConnState) -> (usize, [usize; 3]) {
    (state.pubsub.count(), state.pubsub.counts())
}

fn resp_of(state: &ConnState) -> u8 {
    if state.version == Version::Resp3 {
        3
    } else {
        2
    }
}

/// Copies what `CLIENT LIST` shows of the connection to the node's registry, if it ran a
/// command since the last copy: the time `at` always (no lock), the rest only if it
/// changed.
pub(super) fn publish(state: &mut ConnState, at: Instant) {
    if !std::mem::take(&mut state.unpublished) {
        return;
    }
    let client = state.client.client();
    client.touch(at);
    if !state.shown.differs(state) {
        return;
    }
    let user = state.user.as_ref().map_or("default", |u| u.name());
    let (subscriptions, [_, patterns, shard_channels]) = subscriptions_of(state);
    client.update(|i| {
        i.cmd.clone_from(&state.last_cmd);
        i.name = state.name.clone().unwrap_or_default();
        i.resp = resp_of(state);
        if i.user != user {
            i.user = user.to_string();
        }
        i.multi = state.txn.queued();
        i.subscriptions = subscriptions;
        i.patterns = patterns;
        i.shard_channels = shard_channels;
    });
    state.shown = Shown {
        stale: false,
        name: state.name.clone(),
        resp: resp_of(state),
        user: state.user.clone(),
        multi: state.txn.queued(),
        subscriptions: subscriptions_of(state),
    };
}

fn push_lower(out: &mut String, name: &[u8]) {
    out.extend(name.iter().take(64).map(|b| b.to_ascii_lowercase() as char));
}

/// `CLIENT subcommand …`.
pub(super) fn client(cmd: &Cmd<'_>, state: &mut ConnState) -> Vec<u8> {
    if cmd.len() < 2 {
        return arity_error(cmd);
    }
    let sub = cmd.arg(1);
    if sub.eq_ignore_ascii_case(b"SETNAME") && cmd.len() == 3 {
        let name = cmd.arg(2);
        if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
            return err("ERR Client names cannot contain spaces, newlines or special characters.");
        }
        state.name = (!name.is_empty()).then(|| name.to_vec());
        ready(|o| resp::simple(o, "OK"))
    } else if sub.eq_ignore_ascii_case(b"GETNAME") {
        let name = state.name.clone();
        let v = state.version;
        ready(|o| match &name {
            Some(n) => resp::bulk(o, n),
            None => resp::null(o, v),
        })
    } else if sub.eq_ignore_ascii_case(b"ID") {
        let id = state.id as i64;
        ready(|o| resp::integer(o, id))
    } else if sub.eq_ignore_ascii_case(b"SETINFO") && cmd.len() == 4 {
        setinfo(cmd.arg(2), cmd.arg(3), state)
    } else if sub.eq_ignore_ascii_case(b"LIST") {
        list(cmd, state)
    } else if sub.eq_ignore_ascii_case(b"INFO") && cmd.len() == 2 {
        let line = line(state.client.client(), state.id, "client|info");
        ready(|o| resp::verbatim(o, line.as_bytes(), state.version))
    } else if sub.eq_ignore_ascii_case(b"KILL") && cmd.len() >= 3 {
        kill(cmd, state)
    } else if (sub.eq_ignore_ascii_case(b"NO-EVICT") || sub.eq_ignore_ascii_case(b"NO-TOUCH"))
        && cmd.len() == 3
    {
        ready(|o| resp::simple(o, "OK"))
    } else {
        err(&format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(sub)
        ))
    }
}

/// `CLIENT SETINFO LIB-NAME|LIB-VER value`.
fn setinfo(attr: &[u8], value: &[u8], state: &ConnState) -> Vec<u8> {
    let lib_name = attr.eq_ignore_ascii_case(b"LIB-NAME");
    if !lib_name && !attr.eq_ignore_ascii_case(b"LIB-VER") {
        return err(&format!(
            "ERR Unrecognized option '{}'",
            String::from_utf8_lossy(attr)
        ));
    }
    if value.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return err(&format!(
            "ERR {} cannot contain spaces, newlines or special characters.",
            String::from_utf8_lossy(attr).to_lowercase()
        ));
    }
    let value = String::from_utf8_lossy(value).into_owned();
    state.client.client().update(|i| {
        if lib_name {
            i.lib_name = value;
        } else {
            i.lib_ver = value;
        }
    });
    ready(|o| resp::simple(o, "OK"))
}

/// A connection type of `CLIENT LIST TYPE` / `CLIENT KILL TYPE`: `Some(pubsub)`, or an
/// error reply for an unknown type. `master`/`replica` match nothing (no Redis replication).
fn client_type(t: &[u8]) -> Result<Option<bool>, Vec<u8>> {
    if t.eq_ignore_ascii_case(b"normal") {
        Ok(Some(false))
    } else if t.eq_ignore_ascii_case(b"pubsub") {
        Ok(Some(true))
    } else if t.eq_ignore_ascii_case(b"master")
        || t.eq_ignore_ascii_case(b"replica")
        || t.eq_ignore_ascii_case(b"slave")
    {
        Ok(None)
    } else {
        Err(err(&format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(t)
        )))
    }
}

/// True if `client` is of the type (`Some(pubsub)`; `None`: a replication link, none here).
fn of_type(info: &ClientInfo, ty: Option<bool>) -> bool {
    ty.is_some_and(|pubsub| (info.subscriptions > 0) == pubsub)
}

/// `CLIENT LIST [TYPE t] [ID id …]`.
fn list(cmd: &Cmd<'_>, state: &ConnState) -> Vec<u8> {
    let mut ty = None;
    let mut ids: Option<Vec<u64>> = None;
    if cmd.len() > 2 {
        let opt = cmd.arg(2);
        if opt.eq_ignore_ascii_case(b"TYPE") && cmd.len() == 4 {
            match client_type(cmd.arg(3)) {
                Ok(t) => ty = Some(t),
                Err(e) => return e,
            }
        } else if opt.eq_ignore_ascii_case(b"ID") && cmd.len() > 3 {
            let mut want = Vec::new();
            for i in 3..cmd.len() {
                match parse_i64(cmd.arg(i)) {
                    Some(id) if id > 0 => want.push(id as u64),
                    _ => return err("ERR Invalid client ID"),
                }
            }
            ids = Some(want);
        } else {
            return syntax_error();
        }
    }
    let mut text = String::new();
    for c in state.client.registry().list() {
        if ids.as_ref().is_some_and(|ids| !ids.contains(&c.id)) {
            continue;
        }
        if let Some(t) = ty {
            if !of_type(&c.info(), t) {
                continue;
            }
        }
        text.push_str(&line(&c, state.id, "client|list"));
    }
    ready(|o| resp::verbatim(o, text.as_bytes(), state.version))
}

/// What `CLIENT KILL`'s filters select.
#[derive(Default)]
struct Filters {
    id: Option<u64>,
    ty: Option<Option<bool>>,
    user: Option<Vec<u8>>,
    addr: Option<Vec<u8>>,
    laddr: Option<Vec<u8>>,
    max_age: Option<u64>,
    skip_me: bool,
}

impl Filters {
    fn select(&self, c: &Client, me: u64) -> bool {
        let info = c.info();
        let addr_is = |want: &Option<Vec<u8>>, have: &Option<String>| {
            want.as_ref()
                .is_none_or(|w| have.as_ref().is_some_and(|h| h.as_bytes() == &w[..]))
        };
        !(self.skip_me && c.id == me)
            && self.id.is_none_or(|id| id == c.id)
            && self.ty.is_none_or(|t| of_type(&info, t))
            && self
                .user
                .as_ref()
                .is_none_or(|u| info.user.as_bytes() == &u[..])
            && addr_is(&self.addr, &c.peer.addr)
            && addr_is(&self.laddr, &c.peer.laddr)
            && self
                .max_age
                .is_none_or(|age| c.opened.elapsed().as_secs() >= age)
    }
}

/// `CLIENT KILL addr` (the old form: `+OK` or an error) or `CLIENT KILL filter value …`
/// (the number killed). The calling connection is closed after its reply.
fn kill(cmd: &Cmd<'_>, state: &mut ConnState) -> Vec<u8> {
    let mut f = Filters {
        skip_me: true,
        ..Default::default()
    };
    let old = cmd.len() == 3;
    if old {
        f.addr = Some(cmd.arg(2).to_vec());
        f.skip_me = false;
    } else {
        if !cmd.len().is_multiple_of(2) {
            return syntax_error();
        }
        for i in (2..cmd.len()).step_by(2) {
            let (filter, value) = (cmd.arg(i), cmd.arg(i + 1));
            let is = |name: &[u8]| filter.eq_ignore_ascii_case(name);
            if is(b"ID") {
                match parse_i64(value) {
                    Some(id) if id > 0 => f.id = Some(id as u64),
                    _ => return err("ERR client-id should be greater than 0"),
                }
            } else if is(b"TYPE") {
                match client_type(value) {
                    Ok(t) => f.ty = Some(t),
                    Err(e) => return e,
                }
            } else if is(b"USER") {
                if !state
                    .users
                    .list()
                    .iter()
                    .any(|u| u.name().as_bytes() == value)
                {
                    return err(&format!(
                        "ERR No such user '{}'",
                        String::from_utf8_lossy(value)
                    ));
                }
                f.user = Some(value.to_vec());
            } else if is(b"ADDR") {
                f.addr = Some(value.to_vec());
            } else if is(b"LADDR") {
                f.laddr = Some(value.to_vec());
            } else if is(b"MAXAGE") {
                match parse_i64(value) {
                    Some(age) if age >= 0 => f.max_age = Some(age as u64),
                    _ => return err("ERR value is not an integer or out of range"),
                }
            } else if is(b"SKIPME") {
                if value.eq_ignore_ascii_case(b"yes") {
                    f.skip_me = true;
                } else if value.eq_ignore_ascii_case(b"no") {
                    f.skip_me = false;
                } else {
                    return syntax_error();
                }
            } else {
                return syntax_error();
            }
        }
    }
    let mut killed = 0i64;
    for c in state.client.registry().list() {
        if f.select(&c, state.id) {
            killed += 1;
            if c.id == state.id {
                // After this reply, as Redis does.
                state.quit = true;
            } else {
                c.kill();
            }
        }
    }
    if old {
        return if killed > 0 {
            ready(|o| resp::simple(o, "OK"))
        } else {
            err("ERR No such client")
        };
    }
    ready(|o| resp::integer(o, killed))
}

/// A connection as a `CLIENT LIST` line (Redis 7.2's fields). The calling connection
/// (`me`) shows the command running now (`cmd`) and no idle time.
fn line(c: &Arc<Client>, me: u64, cmd: &str) -> String {
    let i = c.info();
    let mine = c.id == me;
    let mut flags = String::new();
    if i.subscriptions > 0 {
        flags.push('P');
    }
    if i.multi.is_some() {
        flags.push('x');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let idle = if mine { 0 } else { i.last.elapsed().as_secs() };
    let unknown = || "unknown".to_string();
    format!(
        "id={} addr={} laddr={} fd={} name={} age={} idle={idle} flags={flags} db=0 sub={} \
         psub={} ssub={} multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 \
         oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={} lib-name={} \
         lib-ver={}\n",
        c.id,
        c.peer.addr.clone().unwrap_or_else(unknown),
        c.peer.laddr.clone().unwrap_or_else(unknown),
        c.peer.fd.unwrap_or(-1),
        String::from_utf8_lossy(&i.name),
        c.opened.elapsed().as_secs(),
        i.subscriptions - i.patterns - i.shard_channels,
        i.patterns,
        i.shard_channels,
        i.multi.map_or(-1, |n| n as i64),
        if mine { cmd } else { &i.cmd },
        i.user,
        i.resp,
        i.lib_name,
        i.lib_ver,
    )
}
