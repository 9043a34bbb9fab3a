//! String commands beyond GET/SET: `SETNX`, `GETSET`, `GETDEL`, `APPEND`, `STRLEN`,
//! `GETRANGE`/`SUBSTR`, `SETRANGE`, `INCRBYFLOAT`, `MSETNX`.
//!
//! Reads (`STRLEN`, `GETRANGE`) are a `Get` shaped differently; read-modify-writes are one
//! op each, run at the key's worker (`shard::strings`); `MSETNX` is one [`Op::Exec`] whose
//! guards say every key is absent, so it sets all keys or none — its keys must share a
//! worker (`-CROSSSLOT` otherwise, nothing written).

use super::commands::{arity_error, parse_i64, Cmd, Plan};
use super::reply::{err, Shape};
use crate::op::{Condition, Guard, Op};
use crate::shard::parse_float;

/// The plan of string command `name` (upper case), or `None` if it is not one.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>) -> Option<Plan<'a>> {
    let argc = cmd.len();
    let exact = |n: usize| (argc != n).then(|| Plan::Reply(arity_error(cmd)));
    Some(match name {
        b"SETNX" => exact(3).unwrap_or(Plan::One(
            Shape::Int,
            Op::Assign {
                key: cmd.arg(1),
                value: cmd.arg(2),
                condition: Condition::IfAbsent,
            },
        )),
        b"GETSET" => exact(3).unwrap_or(Plan::One(
            Shape::Get,
            Op::GetSet {
                key: cmd.arg(1),
                value: cmd.arg(2),
            },
        )),
        b"GETDEL" => exact(2).unwrap_or(Plan::One(Shape::Get, Op::GetDel { key: cmd.arg(1) })),
        b"APPEND" => exact(3).unwrap_or(Plan::One(
            Shape::Int,
            Op::Append {
                key: cmd.arg(1),
                value: cmd.arg(2),
            },
        )),
        b"STRLEN" => exact(2).unwrap_or(Plan::One(Shape::StrLen, Op::Get { key: cmd.arg(1) })),
        b"GETRANGE" | b"SUBSTR" => {
            exact(4).unwrap_or_else(|| match (parse_i64(cmd.arg(2)), parse_i64(cmd.arg(3))) {
                (Some(start), Some(end)) => {
                    Plan::One(Shape::Range(start, end), Op::Get { key: cmd.arg(1) })
                }
                _ => Plan::Reply(err("ERR value is not an integer or out of range")),
            })
        }
        b"SETRANGE" => exact(4).unwrap_or_else(|| match parse_i64(cmd.arg(2)) {
            None => Plan::Reply(err("ERR value is not an integer or out of range")),
            Some(o) if o < 0 => Plan::Reply(err("ERR offset is out of range")),
            Some(offset) => Plan::One(
                Shape::Int,
                Op::SetRange {
                    key: cmd.arg(1),
                    offset: offset as u64,
                    value: cmd.arg(3),
                },
            ),
        }),
        b"INCRBYFLOAT" => exact(3).unwrap_or_else(|| match parse_float(cmd.arg(2)) {
            None => Plan::Reply(err("ERR value is not a valid float")),
            Some(by) => Plan::One(
                Shape::Get,
                Op::IncrByFloat {
                    key: cmd.arg(1),
                    by,
                },
            ),
        }),
        b"MSETNX" => {
            if argc < 3 || argc.is_multiple_of(2) {
                return Some(Plan::Reply(arity_error(cmd)));
            }
            let pairs = (1..argc).step_by(2).map(|i| (cmd.arg(i), cmd.arg(i + 1)));
            let guards = pairs.clone().map(|(k, _)| (k, Guard::Absent)).collect();
            let ops = pairs
                .map(|(key, value)| Op::Assign {
                    key,
                    value,
                    condition: Condition::Always,
                })
                .collect();
            Plan::One(
                Shape::AllOrNone,
                Op::Exec {
                    key: cmd.arg(1),
                    guards,
                    ops,
                },
            )
        }
        _ => return None,
    })
}

/// `GETRANGE`'s bytes of `s`, with Redis's index rules (negative from the end, clamped).
pub(crate) fn range(s: &[u8], start: i64, end: i64) -> &[u8] {
    let len = s.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return &[];
    }
    let mut start = if start < 0 { len + start } else { start };
    let mut end = if end < 0 { len + end } else { end };
    start = start.max(0);
    end = end.max(0).min(len - 1);
    if start > end {
        return &[];
    }
    &s[start as usize..=end as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrange_follows_redis_index_rules() {
        let s = b"Hello World";
        assert_eq!(range(s, 0, 4), b"Hello");
        assert_eq!(range(s, -5, -1), b"World");
        assert_eq!(range(s, 0, -1), s);
        assert_eq!(range(s, 5, 3), b"");
        assert_eq!(range(s, 100, 200), b"");
        assert_eq!(range(s, -100, 2), b"Hel");
        assert_eq!(range(s, -1, -5), b"");
        assert_eq!(range(s, 0, 100), s);
        assert_eq!(range(b"", 0, -1), b"");
    }
}
