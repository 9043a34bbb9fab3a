//! `CLIENT` subcommands: SETNAME, GETNAME, ID, SETINFO, LIST, INFO, KILL, NO-EVICT,
//! NO-TOUCH. Connections are not registered node-wide, so LIST/INFO/KILL reach the calling
//! connection only (docs/protocol.md, "Keys and server").

use wire::resp::{self, Version};

use super::commands::{arity_error, parse_i64, syntax_error, Cmd};
use super::reply::{err, ready};
use super::ConnState;

/// `CLIENT subcommand …`.
pub(super) fn client(cmd: &Cmd<'_>, state: &mut ConnState) -> Vec<u8> {
    if cmd.len() < 2 {
        return arity_error(cmd);
    }
    let sub = cmd.arg(1);
    if sub.eq_ignore_ascii_case(b"SETNAME") && cmd.len() == 3 {
        state.name = Some(cmd.arg(2).to_vec());
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
        ready(|o| resp::simple(o, "OK"))
    } else if sub.eq_ignore_ascii_case(b"LIST") || sub.eq_ignore_ascii_case(b"INFO") {
        // Connections are not registered node-wide: the list holds the calling
        // connection (INFO's `connected_clients` counts them all).
        let line = client_line(state);
        ready(|o| resp::verbatim(o, line.as_bytes(), state.version))
    } else if sub.eq_ignore_ascii_case(b"KILL") && cmd.len() >= 3 {
        if cmd.len() == 3 {
            // The old form, `CLIENT KILL addr:port`.
            return err("ERR No such client");
        }
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

/// `CLIENT KILL filter value …` (the new form): only the calling connection can be
/// reached from here, so it is the one killed when `ID` names it and `SKIPME no` is given
/// (closed after the reply, as Redis does); otherwise none.
fn kill(cmd: &Cmd<'_>, state: &mut ConnState) -> Vec<u8> {
    if !cmd.len().is_multiple_of(2) {
        return syntax_error();
    }
    let mut me = true;
    let mut skip_me = true;
    for i in (2..cmd.len()).step_by(2) {
        let (filter, value) = (cmd.arg(i), cmd.arg(i + 1));
        if filter.eq_ignore_ascii_case(b"ID") {
            match parse_i64(value) {
                Some(id) if id > 0 => me &= id as u64 == state.id,
                _ => return err("ERR client-id should be greater than 0"),
            }
        } else if filter.eq_ignore_ascii_case(b"SKIPME") {
            if value.eq_ignore_ascii_case(b"yes") {
                skip_me = true;
            } else if value.eq_ignore_ascii_case(b"no") {
                skip_me = false;
            } else {
                return syntax_error();
            }
        } else if [&b"ADDR"[..], b"LADDR", b"USER", b"TYPE", b"MAXAGE"]
            .iter()
            .any(|f| filter.eq_ignore_ascii_case(f))
        {
            // Addresses are not kept per connection: these match nothing here.
            me = false;
        } else {
            return syntax_error();
        }
    }
    if me && !skip_me {
        state.quit = true;
        return ready(|o| resp::integer(o, 1));
    }
    ready(|o| resp::integer(o, 0))
}

/// The calling connection as a `CLIENT LIST` line (Redis's fields; addresses are not
/// kept per connection, so `addr` is unknown).
fn client_line(state: &ConnState) -> String {
    let name = state
        .name
        .as_ref()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .unwrap_or_default();
    let multi = if state.txn.in_multi() { 0 } else { -1 };
    let resp = if state.version == Version::Resp3 {
        3
    } else {
        2
    };
    format!(
        "id={} addr=unknown laddr=unknown fd=-1 name={name} age=0 idle=0 flags=N db=0 sub=0 \
         psub=0 ssub=0 multi={multi} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 tot-mem=0 \
         rbs=0 rbp=0 obl=0 oll=0 omem=0 events=r cmd=client|list user={} redir=-1 resp={resp} \
         lib-name= lib-ver=\n",
        state.id,
        state
            .user
            .as_ref()
            .map_or("default".to_string(), |u| u.name().to_string()),
    )
}
