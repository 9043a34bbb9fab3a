//! Lua values to and from RESP, as Redis converts them (RESP2 rules, the default of a
//! script):
//!
//! | RESP reply of `redis.call` | Lua |
//! |---|---|
//! | integer | number |
//! | bulk string | string |
//! | null bulk, null array | `false` |
//! | array | table (1..n) |
//! | status | table `{ok = text}` |
//! | error | table `{err = text}` (`redis.call` raises it) |
//!
//! | Lua value a script returns | RESP |
//! |---|---|
//! | number | integer, truncated toward zero (out of range or NaN: the smallest integer, as Redis's C cast on x86-64) |
//! | string | bulk string |
//! | `true` | integer 1 |
//! | `false`, `nil`, anything else | null |
//! | table with a string `err` | error (CR and LF turned to spaces) |
//! | table with a string `ok` | status (likewise) |
//! | other table | array of its elements 1, 2, … up to the first `nil` |

use mlua::{Lua, Table, Value};
use wire::resp::{self, Reply, Version};

/// Deepest nesting of tables a script may return (a table containing itself is cut here).
pub(super) const MAX_DEPTH: usize = 512;

/// Why a script's value could not become a reply.
#[derive(Debug)]
pub(super) enum ReplyError {
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Larger than the reply limit.
    TooLarge,
}

/// Appends the RESP encoding of `value` to `out`, keeping it under `max_bytes`.
pub(super) fn to_resp(
    value: &Value,
    v: Version,
    out: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<(), ReplyError> {
    encode(value, v, out, max_bytes, 0)
}

fn encode(
    value: &Value,
    v: Version,
    out: &mut Vec<u8>,
    max_bytes: usize,
    depth: usize,
) -> Result<(), ReplyError> {
    if out.len() > max_bytes {
        return Err(ReplyError::TooLarge);
    }
    match value {
        Value::Number(n) => resp::integer(out, truncate(*n)),
        Value::Integer(n) => resp::integer(out, *n),
        Value::String(s) => {
            let bytes = s.as_bytes();
            if out.len() + bytes.len() > max_bytes {
                return Err(ReplyError::TooLarge);
            }
            resp::bulk(out, &bytes)
        }
        Value::Boolean(true) => resp::integer(out, 1),
        Value::Table(t) => {
            if depth >= MAX_DEPTH {
                return Err(ReplyError::TooDeep);
            }
            if let Some(msg) = text_field(t, "err") {
                resp::error(out, &one_line(&msg));
            } else if let Some(msg) = text_field(t, "ok") {
                resp::simple(out, &one_line(&msg));
            } else {
                // Counted first, then encoded one item at a time: mlua keeps a bounded
                // number of Lua values alive at once, so the items are not collected.
                let mut len = 0usize;
                while !matches!(t.raw_get::<Value>(len + 1), Ok(Value::Nil) | Err(_)) {
                    len += 1;
                    if len > max_bytes / 4 {
                        return Err(ReplyError::TooLarge);
                    }
                }
                resp::array_header(out, len);
                for i in 1..=len {
                    let item = t.raw_get::<Value>(i).unwrap_or(Value::Nil);
                    encode(&item, v, out, max_bytes, depth + 1)?;
                }
            }
        }
        _ => resp::null(out, v),
    }
    Ok(())
}

/// A Lua number as Redis's `(long long)` cast gives it on x86-64.
pub(super) fn truncate(n: f64) -> i64 {
    // 2^63: the first double past i64::MAX.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if n.is_finite() && n > -LIMIT - 1.0 && n < LIMIT {
        n as i64
    } else {
        i64::MIN
    }
}

/// The string held in field `name` of `t`, if it is one.
pub(super) fn text_field(t: &Table, name: &str) -> Option<String> {
    match t.raw_get::<Value>(name) {
        Ok(Value::String(s)) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        _ => None,
    }
}

/// Status and error texts stay on one line, as Redis keeps them.
fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// `redis.call`'s reply as a Lua value.
pub(super) fn from_reply(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Integer(n) => Value::Number(n as f64),
        Reply::Bulk(Some(b)) => Value::String(lua.create_string(&b)?),
        Reply::Bulk(None) | Reply::Array(None) | Reply::Null => Value::Boolean(false),
        Reply::Simple(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", lua.create_string(&s)?)?;
            Value::Table(t)
        }
        Reply::Error(s) => {
            let t = lua.create_table()?;
            t.raw_set("err", lua.create_string(&s)?)?;
            Value::Table(t)
        }
        Reply::Array(Some(items)) | Reply::Set(items) | Reply::Push(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, from_reply(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Map(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (k, v)) in pairs.into_iter().enumerate() {
                t.raw_set(2 * i + 1, from_reply(lua, k)?)?;
                t.raw_set(2 * i + 2, from_reply(lua, v)?)?;
            }
            Value::Table(t)
        }
        Reply::Double(d) => Value::String(lua.create_string(d.to_string())?),
        Reply::Boolean(b) => {
            if b {
                Value::Number(1.0)
            } else {
                Value::Boolean(false)
            }
        }
        Reply::BigNumber(b) => Value::String(lua.create_string(&b)?),
        Reply::Verbatim { text, .. } => Value::String(lua.create_string(&text)?),
        Reply::Attribute { reply, .. } => from_reply(lua, *reply)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_truncate_like_redis() {
        assert_eq!(truncate(3.99), 3);
        assert_eq!(truncate(-3.99), -3);
        assert_eq!(truncate(1e20), i64::MIN);
        assert_eq!(truncate(f64::NAN), i64::MIN);
        assert_eq!(truncate(-9_223_372_036_854_775_808.0), i64::MIN);
        assert_eq!(truncate(9_007_199_254_740_993.0), 9_007_199_254_740_992);
    }
}
