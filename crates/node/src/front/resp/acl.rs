//! Authentication and permissions on the RESP port: AUTH, HELLO's AUTH option, ACL WHOAMI /
//! LIST / USERS, and the NOAUTH / NOPERM checks before a command runs (see
//! [`crate::auth`]).

use std::sync::Arc;

use wire::resp;

use super::commands::{arity_error, Cmd};
use super::reply::{err, ready};
use super::ConnState;
use crate::auth::{AuthError, Permission, User};

/// Redis's reply to a command before authentication.
pub(super) const NOAUTH: &str = "NOAUTH Authentication required.";
/// Redis's reply to a wrong user or password.
pub(super) const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// True for the commands a connection may send before it authenticates (as Redis: AUTH,
/// HELLO — which must then carry AUTH —, QUIT and RESET).
pub(super) fn allowed_before_auth(name: &[u8]) -> bool {
    [&b"AUTH"[..], b"HELLO", b"QUIT", b"RESET"]
        .iter()
        .any(|c| name.eq_ignore_ascii_case(c))
}

/// The NOPERM reply for a refused command `cmd`.
pub(super) fn noperm(e: &AuthError, cmd: &Cmd<'_>) -> Vec<u8> {
    match e {
        AuthError::Key { .. } => err("NOPERM No permissions to access a key"),
        AuthError::Denied { user, .. } => err(&format!(
            "NOPERM User {user} has no permissions to run the '{}' command",
            cmd.name_lower()
        )),
        AuthError::Required => err(NOAUTH),
        AuthError::WrongPassword => err(WRONGPASS),
    }
}

/// Checks `user` and `password` and, if they match, makes the connection that user.
pub(super) fn login(state: &mut ConnState, user: &[u8], password: &[u8]) -> Result<(), Vec<u8>> {
    let name = String::from_utf8_lossy(user);
    match state.users.authenticate(&name, password) {
        Ok(u) => {
            state.user = Some(u);
            Ok(())
        }
        Err(_) => Err(err(WRONGPASS)),
    }
}

/// `AUTH password` (the user `default`) or `AUTH user password`.
pub(super) fn auth(cmd: &Cmd<'_>, state: &mut ConnState) -> Vec<u8> {
    let (user, password) = match cmd.len() {
        2 if !state.users.required() => {
            return err(
                "ERR AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            )
        }
        2 => (&b""[..], cmd.arg(1)),
        3 => (cmd.arg(1), cmd.arg(2)),
        _ => return arity_error(cmd),
    };
    match login(state, user, password) {
        Ok(()) => ready(|o| resp::simple(o, "OK")),
        Err(reply) => reply,
    }
}

/// `ACL WHOAMI`, `ACL LIST` and `ACL USERS` (the last two need the admin permission). The
/// list shows each user's keys and permissions in Redis's rule syntax, never its password
/// hash.
pub(super) fn acl(cmd: &Cmd<'_>, state: &ConnState) -> Vec<u8> {
    if cmd.len() < 2 {
        return arity_error(cmd);
    }
    let Some(me) = state.user.as_ref() else {
        return err(NOAUTH);
    };
    let sub = cmd.arg(1);
    if sub.eq_ignore_ascii_case(b"WHOAMI") {
        let name = me.name().to_string();
        return ready(|o| resp::bulk(o, name.as_bytes()));
    }
    let list = sub.eq_ignore_ascii_case(b"LIST");
    if !list && !sub.eq_ignore_ascii_case(b"USERS") {
        return err(&format!(
            "ERR unknown subcommand '{}'. Try ACL WHOAMI, ACL LIST or ACL USERS.",
            String::from_utf8_lossy(sub)
        ));
    }
    if !me.has(Permission::Admin) {
        return err(&format!(
            "NOPERM User {} has no permissions to run the 'acl|{}' command",
            me.name(),
            String::from_utf8_lossy(sub).to_lowercase()
        ));
    }
    let users: Vec<Arc<User>> = state.users.list();
    ready(|o| {
        resp::array_header(o, users.len());
        for u in &users {
            if list {
                resp::bulk(o, u.acl_rule().as_bytes());
            } else {
                resp::bulk(o, u.name().as_bytes());
            }
        }
    })
}
