//! Users, permissions and password checks (no I/O).
//!
//! A node with users configured (`[[users]]` in its TOML file, or the quick form
//! `--password`, which is the user `default` with every permission) requires every client
//! connection to authenticate before anything else: RESP `AUTH` / `HELLO … AUTH`, the
//! native protocol's `Auth` request. A node without users is open: every connection acts
//! as the user `default` with every permission on every key.
//!
//! Passwords are stored as SHA-256 hex digests and compared in constant time. A plain,
//! unsalted SHA-256 is the right tool for high-entropy secrets (generated tokens, as
//! Redis's ACL uses too): a check costs microseconds, so `AUTH` on every new pooled
//! connection stays cheap and cannot be turned into a CPU-exhaustion attack, as a
//! deliberately slow hash (argon2, ~50 ms each) could. Weak, human-chosen passwords are not
//! protected against an offline guess by anyone who reads the configuration file: see
//! `docs/security.md`.
//!
//! Permissions: `read` (GET, MGET, EXISTS, subscriptions, …), `write` (SET, DEL, INCR,
//! merges, …), `admin` (leave, replication changes, forget; ACL LIST). Key patterns
//! restrict which keys a user's reads and writes may touch: `app:*` (a prefix), `*` (all,
//! the default) or an exact key; every key of a multi-key request must match.

use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The user of the quick form (`--password`) and of nodes without users.
pub const DEFAULT_USER: &str = "default";

/// A permission a user may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Read keys.
    Read,
    /// Write keys.
    Write,
    /// Operator requests: leave, replication changes, forget; ACL LIST.
    Admin,
}

impl Permission {
    /// `read`, `write` or `admin`.
    pub fn name(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Permission::Read => 1,
            Permission::Write => 2,
            Permission::Admin => 4,
        }
    }
}

/// One user as configured (a TOML `[[users]]` table).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The user's name (unique).
    pub name: String,
    /// SHA-256 of the password, 64 hex digits (`printf %s "$PASS" | sha256sum`).
    pub password_sha256: String,
    /// What the user may do.
    pub permissions: Vec<Permission>,
    /// Key patterns the user's reads and writes may touch: `prefix*`, `*` or an exact key.
    /// Default: `["*"]` (every key).
    #[serde(default = "all_keys")]
    pub keys: Vec<String>,
}

fn all_keys() -> Vec<String> {
    vec!["*".to_string()]
}

impl std::fmt::Debug for UserConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserConfig")
            .field("name", &self.name)
            .field("permissions", &self.permissions)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl UserConfig {
    /// The user `default` with every permission on every key and this password (the quick
    /// form, `--password`).
    pub fn default_with_password(password: &str) -> UserConfig {
        UserConfig {
            name: DEFAULT_USER.to_string(),
            password_sha256: sha256_hex(password.as_bytes()),
            permissions: vec![Permission::Read, Permission::Write, Permission::Admin],
            keys: all_keys(),
        }
    }
}

/// The SHA-256 of `password` as 64 lower-case hex digits.
pub fn sha256_hex(password: &[u8]) -> String {
    Sha256::digest(password)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Why the configured users were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UsersError {
    /// A user without a name.
    #[error("users: a user has an empty name")]
    EmptyName,
    /// Two users of one name.
    #[error("users: {0:?} is configured twice")]
    Duplicate(String),
    /// The password hash is not 64 hex digits.
    #[error("users: {0:?}: password_sha256 must be 64 hex digits (the SHA-256 of the password)")]
    BadHash(String),
    /// An empty key pattern.
    #[error("users: {0:?}: empty key pattern")]
    EmptyPattern(String),
}

/// Which keys a pattern matches.
#[derive(Clone, Debug, PartialEq, Eq)]
enum KeyPattern {
    /// Every key starting with these bytes (`*` is the empty prefix).
    Prefix(Vec<u8>),
    /// This key only.
    Exact(Vec<u8>),
}

impl KeyPattern {
    fn parse(p: &str) -> KeyPattern {
        match p.strip_suffix('*') {
            Some(prefix) => KeyPattern::Prefix(prefix.as_bytes().to_vec()),
            None => KeyPattern::Exact(p.as_bytes().to_vec()),
        }
    }

    fn matches(&self, key: &[u8]) -> bool {
        match self {
            KeyPattern::Prefix(p) => key.starts_with(p),
            KeyPattern::Exact(k) => key == &k[..],
        }
    }

    fn render(&self) -> String {
        match self {
            KeyPattern::Prefix(p) => format!("{}*", String::from_utf8_lossy(p)),
            KeyPattern::Exact(k) => String::from_utf8_lossy(k).into_owned(),
        }
    }
}

/// A user a connection can act as.
#[derive(Debug)]
pub struct User {
    name: String,
    /// SHA-256 of the password; `None` for the open node's `default`.
    hash: Option<[u8; 32]>,
    permissions: u8,
    keys: Vec<KeyPattern>,
    /// One of `keys` matches every key (`*`): key checks are skipped (they ran between
    /// every two requests).
    any_key: bool,
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The connection has not authenticated.
    #[error("authentication required")]
    Required,
    /// Wrong user or password.
    #[error("invalid username-password pair or user is disabled")]
    WrongPassword,
    /// The user lacks a permission.
    #[error("user {user} has no {} permission", need.name())]
    Denied {
        /// The user.
        user: String,
        /// The permission the request needs.
        need: Permission,
    },
    /// A key is outside the user's patterns.
    #[error("user {user} has no permission to access a key of this request")]
    Key {
        /// The user.
        user: String,
    },
}

impl User {
    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True if the user holds `p`.
    pub fn has(&self, p: Permission) -> bool {
        self.permissions & p.bit() != 0
    }

    /// True if the user may access every key (a `*` pattern): listing the key space
    /// (`KEYS`, `SCAN`, `FLUSHDB`) needs it.
    pub fn all_keys(&self) -> bool {
        self.any_key
    }

    /// True if `key` matches one of the user's patterns.
    pub fn may_access(&self, key: &[u8]) -> bool {
        self.keys.iter().any(|p| p.matches(key))
    }

    /// Checks that the user holds `need` and may access every one of `keys`.
    pub fn check<'k>(
        &self,
        need: Permission,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), AuthError> {
        if !self.has(need) {
            return Err(AuthError::Denied {
                user: self.name.clone(),
                need,
            });
        }
        self.check_keys(keys)
    }

    /// Checks that the user may access every one of `keys`.
    pub fn check_keys<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), AuthError> {
        if self.any_key {
            return Ok(());
        }
        for key in keys {
            if !self.may_access(key) {
                return Err(AuthError::Key {
                    user: self.name.clone(),
                });
            }
        }
        Ok(())
    }

    /// The user as an ACL LIST line, in Redis's rule syntax, without its password hash:
    /// `user alice on sanitized-hash ~app:* +@read +@write`.
    pub fn acl_rule(&self) -> String {
        let mut s = format!("user {} on", self.name);
        s.push_str(if self.hash.is_some() {
            " sanitized-hash"
        } else {
            " nopass"
        });
        for k in &self.keys {
            s.push_str(" ~");
            s.push_str(&k.render());
        }
        for p in [Permission::Read, Permission::Write, Permission::Admin] {
            if self.has(p) {
                s.push_str(" +@");
                s.push_str(p.name());
            }
        }
        s
    }
}

/// The users of a node.
#[derive(Debug)]
pub struct Users {
    list: Vec<Arc<User>>,
    /// The identity of every connection to a node without users.
    open: Arc<User>,
}

impl Users {
    /// Checks and loads the configured users.
    pub fn from_config(config: &[UserConfig]) -> Result<Users, UsersError> {
        let mut list: Vec<Arc<User>> = Vec::with_capacity(config.len());
        for u in config {
            if u.name.is_empty() {
                return Err(UsersError::EmptyName);
            }
            if list.iter().any(|o| o.name == u.name) {
                return Err(UsersError::Duplicate(u.name.clone()));
            }
            let hash = parse_hash(&u.password_sha256)
                .ok_or_else(|| UsersError::BadHash(u.name.clone()))?;
            if u.keys.iter().any(String::is_empty) {
                return Err(UsersError::EmptyPattern(u.name.clone()));
            }
            list.push(Arc::new(User {
                name: u.name.clone(),
                hash: Some(hash),
                permissions: u.permissions.iter().fold(0, |acc, p| acc | p.bit()),
                keys: u.keys.iter().map(|k| KeyPattern::parse(k)).collect(),
                any_key: u.keys.iter().any(|k| k == "*"),
            }));
        }
        Ok(Users {
            list,
            open: Arc::new(User {
                name: DEFAULT_USER.to_string(),
                hash: None,
                permissions: 7,
                keys: vec![KeyPattern::Prefix(Vec::new())],
                any_key: true,
            }),
        })
    }

    /// No users: every connection may do everything.
    pub fn open() -> Users {
        Users::from_config(&[]).unwrap_or_else(|_| unreachable!("no users cannot be invalid"))
    }

    /// True if connections must authenticate.
    pub fn required(&self) -> bool {
        !self.list.is_empty()
    }

    /// The identity a new connection starts with: `default` with every permission on an
    /// open node, none (must authenticate) otherwise.
    pub fn initial(&self) -> Option<Arc<User>> {
        (!self.required()).then(|| self.open.clone())
    }

    /// Checks a user name (empty: `default`) and password. On a node without users, the
    /// user `default` is accepted with any password.
    pub fn authenticate(&self, name: &str, password: &[u8]) -> Result<Arc<User>, AuthError> {
        let name = if name.is_empty() { DEFAULT_USER } else { name };
        if !self.required() {
            return if name == DEFAULT_USER {
                Ok(self.open.clone())
            } else {
                Err(AuthError::WrongPassword)
            };
        }
        // Hash even for an unknown user, so the answer's timing doesn't tell names apart.
        let given: [u8; 32] = Sha256::digest(password).into();
        let user = self.list.iter().find(|u| u.name == name);
        let stored = user.and_then(|u| u.hash).unwrap_or([0; 32]);
        let equal: bool = given.ct_eq(&stored).into();
        match user {
            Some(u) if equal => Ok(u.clone()),
            _ => Err(AuthError::WrongPassword),
        }
    }

    /// The configured users (the open node's `default` when there are none).
    pub fn list(&self) -> Vec<Arc<User>> {
        if self.required() {
            self.list.clone()
        } else {
            vec![self.open.clone()]
        }
    }
}

fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        *o = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, pass: &str, perms: &[Permission], keys: &[&str]) -> UserConfig {
        UserConfig {
            name: name.into(),
            password_sha256: sha256_hex(pass.as_bytes()),
            permissions: perms.to_vec(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    #[test]
    fn sha256_hex_matches_a_known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn open_node_lets_everything_through() {
        let users = Users::open();
        assert!(!users.required());
        let u = users.initial().unwrap();
        assert_eq!(u.name(), "default");
        assert!(u.check(Permission::Admin, [&b"anything"[..], b""]).is_ok());
        assert!(users.authenticate("", b"whatever").is_ok());
        assert_eq!(
            users.authenticate("alice", b"x").unwrap_err(),
            AuthError::WrongPassword
        );
    }

    #[test]
    fn passwords_are_checked() {
        let users = Users::from_config(&[
            user("alice", "s3cret", &[Permission::Read], &["*"]),
            UserConfig::default_with_password("pw"),
        ])
        .unwrap();
        assert!(users.required());
        assert!(users.initial().is_none());
        assert_eq!(
            users.authenticate("alice", b"s3cret").unwrap().name(),
            "alice"
        );
        assert_eq!(users.authenticate("", b"pw").unwrap().name(), "default");
        assert_eq!(
            users.authenticate("default", b"pw").unwrap().name(),
            "default"
        );
        for (n, p) in [
            ("alice", "pw"),
            ("bob", "s3cret"),
            ("", "s3cret"),
            ("alice", ""),
        ] {
            assert_eq!(
                users.authenticate(n, p.as_bytes()).unwrap_err(),
                AuthError::WrongPassword,
                "{n}/{p}"
            );
        }
    }

    #[test]
    fn permissions_and_key_patterns_apply_to_every_key() {
        let users = Users::from_config(&[user(
            "app",
            "p",
            &[Permission::Read, Permission::Write],
            &["app:*", "config"],
        )])
        .unwrap();
        let u = users.authenticate("app", b"p").unwrap();
        assert!(u
            .check(Permission::Write, [&b"app:1"[..], b"config"])
            .is_ok());
        assert_eq!(
            u.check(Permission::Read, [&b"app:1"[..], b"other"]),
            Err(AuthError::Key { user: "app".into() })
        );
        assert!(u.check(Permission::Read, [&b"configx"[..]]).is_err());
        assert_eq!(
            u.check(Permission::Admin, []),
            Err(AuthError::Denied {
                user: "app".into(),
                need: Permission::Admin
            })
        );
        assert_eq!(
            u.acl_rule(),
            "user app on sanitized-hash ~app:* ~config +@read +@write"
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        let mut bad = user("a", "p", &[], &["*"]);
        bad.password_sha256 = "abc".into();
        assert_eq!(
            Users::from_config(&[bad]).unwrap_err(),
            UsersError::BadHash("a".into())
        );
        let twice = [user("a", "p", &[], &["*"]), user("a", "q", &[], &["*"])];
        assert!(matches!(
            Users::from_config(&twice),
            Err(UsersError::Duplicate(_))
        ));
        assert!(Users::from_config(&[user("", "p", &[], &["*"])]).is_err());
        assert!(Users::from_config(&[user("a", "p", &[], &[""])]).is_err());
    }

    #[test]
    fn users_parse_from_toml_with_default_keys() {
        #[derive(Deserialize)]
        struct F {
            users: Vec<UserConfig>,
        }
        let f: F = toml::from_str(&format!(
            "[[users]]\nname = \"r\"\npassword_sha256 = \"{}\"\npermissions = [\"read\"]\n",
            sha256_hex(b"x")
        ))
        .unwrap();
        let users = Users::from_config(&f.users).unwrap();
        let u = users.authenticate("r", b"x").unwrap();
        assert!(u.has(Permission::Read) && !u.has(Permission::Write));
        assert!(u.may_access(b"anything"));
    }
}
