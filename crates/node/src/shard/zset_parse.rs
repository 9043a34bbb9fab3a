//! Parsing Redis sorted-set commands as Redis does: options, score and lexicographic range
//! bounds, and the error messages (in Redis's order: syntax, then numbers).

use std::ops::Bound;

use super::coll::{arity, int_arg, parse_scan, ScanArgs, NOT_FLOAT, SYNTAX};
use super::strings::parse_float;

/// Redis's message for a bad score range bound.
const BAD_SCORE_RANGE: &str = "min or max is not a float";
/// Redis's message for a bad lexicographic range bound.
const BAD_LEX_RANGE: &str = "min or max not valid string range item";

/// A bound of a lexicographic range (`-`, `+`, `[member`, `(member`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum LexBound<'a> {
    /// `-`: below every member.
    Min,
    /// `+`: above every member.
    Max,
    /// `[member`.
    Incl(&'a [u8]),
    /// `(member`.
    Excl(&'a [u8]),
}

impl LexBound<'_> {
    /// True if `m` is at or above this bound taken as a minimum.
    pub(crate) fn below(&self, m: &[u8]) -> bool {
        match self {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Incl(b) => m >= *b,
            LexBound::Excl(b) => m > *b,
        }
    }

    /// True if `m` is at or below this bound taken as a maximum.
    pub(crate) fn above(&self, m: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Incl(b) => m <= *b,
            LexBound::Excl(b) => m < *b,
        }
    }
}

/// Which members a range selects.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RangeBy<'a> {
    /// Ranks `start..=stop` (negative: from the end).
    Rank(i64, i64),
    /// Scores within the bounds.
    Score(Bound<f64>, Bound<f64>),
    /// Members within the lexicographic bounds.
    Lex(LexBound<'a>, LexBound<'a>),
}

/// A `ZRANGE`-family read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RangeSpec<'a> {
    /// The members selected (bounds as min, max).
    pub(crate) by: RangeBy<'a>,
    /// From the highest down.
    pub(crate) rev: bool,
    /// `LIMIT offset count` (count -1: all).
    pub(crate) offset: i64,
    /// See `offset`.
    pub(crate) limit: i64,
    /// `WITHSCORES`.
    pub(crate) withscores: bool,
}

/// `ZADD`'s flags.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct AddFlags {
    pub(crate) nx: bool,
    pub(crate) xx: bool,
    pub(crate) gt: bool,
    pub(crate) lt: bool,
    pub(crate) ch: bool,
    pub(crate) incr: bool,
}

/// A parsed sorted-set command (the key apart).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ZsetCmd<'a> {
    /// `ZADD` (and `ZINCRBY` as `ZADD INCR`).
    Add {
        /// The flags.
        flags: AddFlags,
        /// Score/member pairs, in order.
        pairs: Vec<(f64, &'a [u8])>,
    },
    /// `ZSCORE`.
    Score(&'a [u8]),
    /// `ZMSCORE`.
    MScore(Vec<&'a [u8]>),
    /// `ZREM`.
    Rem(Vec<&'a [u8]>),
    /// `ZCARD`.
    Card,
    /// `ZCOUNT` (score bounds) / `ZLEXCOUNT` (lex bounds).
    Count(RangeBy<'a>),
    /// `ZRANK` / `ZREVRANK` (`true`).
    Rank(&'a [u8], bool),
    /// `ZRANGE` and its variants.
    Range(RangeSpec<'a>),
    /// `ZPOPMIN` / `ZPOPMAX` (`max: true`), with the count if given.
    Pop {
        /// From the highest.
        max: bool,
        /// The count, if given.
        count: Option<usize>,
    },
    /// `ZREMRANGEBYRANK` / `ZREMRANGEBYSCORE` / `ZREMRANGEBYLEX`.
    RemRange(RangeBy<'a>),
    /// `ZSCAN`.
    Scan(ScanArgs<'a>),
}

/// A score argument (`ZADD`, `ZINCRBY`): a number, not NaN.
fn score_arg(b: &[u8]) -> Result<f64, String> {
    parse_float(b).ok_or_else(|| NOT_FLOAT.to_string())
}

/// A score range bound: `[(]number`, infinities as `inf`, `+inf`, `-inf`.
fn score_bound(b: &[u8]) -> Result<Bound<f64>, String> {
    let (excl, num) = match b.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, b),
    };
    let x = parse_float(num).ok_or_else(|| BAD_SCORE_RANGE.to_string())?;
    Ok(if excl {
        Bound::Excluded(x)
    } else {
        Bound::Included(x)
    })
}

fn lex_bound(b: &[u8]) -> Result<LexBound<'_>, String> {
    match b {
        b"-" => Ok(LexBound::Min),
        b"+" => Ok(LexBound::Max),
        [b'[', rest @ ..] => Ok(LexBound::Incl(rest)),
        [b'(', rest @ ..] => Ok(LexBound::Excl(rest)),
        _ => Err(BAD_LEX_RANGE.into()),
    }
}

fn score_range<'a>(min: &'a [u8], max: &'a [u8]) -> Result<RangeBy<'a>, String> {
    Ok(RangeBy::Score(score_bound(min)?, score_bound(max)?))
}

fn lex_range<'a>(min: &'a [u8], max: &'a [u8]) -> Result<RangeBy<'a>, String> {
    Ok(RangeBy::Lex(lex_bound(min)?, lex_bound(max)?))
}

#[derive(Clone, Copy, PartialEq)]
enum By {
    Auto,
    Rank,
    Score,
    Lex,
}

/// The `ZRANGE` family: `args` are `a b [options]`; `by` and `rev` are fixed by the
/// command (`By::Auto`, `None`: `ZRANGE`, where options choose).
fn parse_range<'a>(args: &[&'a [u8]], by: By, rev: Option<bool>) -> Result<RangeSpec<'a>, String> {
    let (mut kind, mut direction) = (by, rev);
    let (mut withscores, mut offset, mut limit) = (false, 0, -1);
    let mut j = 2;
    while j < args.len() {
        let opt = args[j];
        let left = args.len() - j - 1;
        if opt.eq_ignore_ascii_case(b"WITHSCORES") {
            withscores = true;
        } else if opt.eq_ignore_ascii_case(b"LIMIT") && left >= 2 {
            offset = int_arg(args[j + 1])?;
            limit = int_arg(args[j + 2])?;
            j += 2;
        } else if direction.is_none() && opt.eq_ignore_ascii_case(b"REV") {
            direction = Some(true);
        } else if kind == By::Auto && opt.eq_ignore_ascii_case(b"BYLEX") {
            kind = By::Lex;
        } else if kind == By::Auto && opt.eq_ignore_ascii_case(b"BYSCORE") {
            kind = By::Score;
        } else {
            return Err(SYNTAX.into());
        }
        j += 1;
    }
    let rev = direction.unwrap_or(false);
    let kind = if kind == By::Auto { By::Rank } else { kind };
    if limit != -1 && kind == By::Rank {
        return Err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
                .into(),
        );
    }
    if withscores && kind == By::Lex {
        return Err("syntax error, WITHSCORES not supported in combination with BYLEX".into());
    }
    // Score and lex ranges are given as max, min when reversed.
    let (a, b) = if rev && kind != By::Rank {
        (args[1], args[0])
    } else {
        (args[0], args[1])
    };
    let by = match kind {
        By::Score => score_range(a, b)?,
        By::Lex => lex_range(a, b)?,
        _ => RangeBy::Rank(int_arg(a)?, int_arg(b)?),
    };
    Ok(RangeSpec {
        by,
        rev,
        offset,
        limit,
        withscores,
    })
}

/// Parses sorted-set command `name` with the arguments after the key; `Err` is Redis's
/// error message (without `ERR `).
pub(crate) fn parse_zset<'a>(name: &[u8], args: &[&'a [u8]]) -> Result<ZsetCmd<'a>, String> {
    let n = args.len();
    let upper = name.to_ascii_uppercase();
    let exact = |k: usize| if n == k { Ok(()) } else { Err(arity(name)) };
    let at_least = |k: usize| if n >= k { Ok(()) } else { Err(arity(name)) };
    Ok(match upper.as_slice() {
        b"ZADD" => {
            at_least(2)?;
            parse_add(args)?
        }
        b"ZINCRBY" => {
            exact(2)?;
            let flags = AddFlags {
                incr: true,
                ..AddFlags::default()
            };
            ZsetCmd::Add {
                flags,
                pairs: vec![(score_arg(args[0])?, args[1])],
            }
        }
        b"ZSCORE" => exact(1).map(|_| ZsetCmd::Score(args[0]))?,
        b"ZMSCORE" => at_least(1).map(|_| ZsetCmd::MScore(args.to_vec()))?,
        b"ZREM" => at_least(1).map(|_| ZsetCmd::Rem(args.to_vec()))?,
        b"ZCARD" => exact(0).map(|_| ZsetCmd::Card)?,
        b"ZCOUNT" => {
            exact(2)?;
            ZsetCmd::Count(score_range(args[0], args[1])?)
        }
        b"ZLEXCOUNT" => {
            exact(2)?;
            ZsetCmd::Count(lex_range(args[0], args[1])?)
        }
        b"ZRANK" | b"ZREVRANK" => {
            exact(1)?;
            ZsetCmd::Rank(args[0], upper.as_slice() == b"ZREVRANK")
        }
        b"ZRANGE" => at_least(2)
            .and_then(|_| parse_range(args, By::Auto, None))?
            .into(),
        b"ZREVRANGE" => at_least(2)
            .and_then(|_| parse_range(args, By::Rank, Some(true)))?
            .into(),
        b"ZRANGEBYSCORE" => at_least(2)
            .and_then(|_| parse_range(args, By::Score, Some(false)))?
            .into(),
        b"ZREVRANGEBYSCORE" => at_least(2)
            .and_then(|_| parse_range(args, By::Score, Some(true)))?
            .into(),
        b"ZRANGEBYLEX" => at_least(2)
            .and_then(|_| parse_range(args, By::Lex, Some(false)))?
            .into(),
        b"ZREVRANGEBYLEX" => at_least(2)
            .and_then(|_| parse_range(args, By::Lex, Some(true)))?
            .into(),
        b"ZPOPMIN" | b"ZPOPMAX" => {
            if n > 1 {
                return Err(SYNTAX.into());
            }
            let count = match args.first() {
                None => None,
                Some(c) => Some(
                    super::parse_strict_i64(c)
                        .and_then(|c| usize::try_from(c).ok())
                        .ok_or_else(|| "value is out of range, must be positive".to_string())?,
                ),
            };
            ZsetCmd::Pop {
                max: upper.as_slice() == b"ZPOPMAX",
                count,
            }
        }
        b"ZREMRANGEBYRANK" => {
            exact(2)?;
            ZsetCmd::RemRange(RangeBy::Rank(int_arg(args[0])?, int_arg(args[1])?))
        }
        b"ZREMRANGEBYSCORE" => {
            exact(2)?;
            ZsetCmd::RemRange(score_range(args[0], args[1])?)
        }
        b"ZREMRANGEBYLEX" => {
            exact(2)?;
            ZsetCmd::RemRange(lex_range(args[0], args[1])?)
        }
        b"ZSCAN" => {
            at_least(1)?;
            ZsetCmd::Scan(parse_scan(args, false)?)
        }
        _ => {
            return Err(format!(
                "unknown command '{}'",
                String::from_utf8_lossy(name)
            ))
        }
    })
}

impl<'a> From<RangeSpec<'a>> for ZsetCmd<'a> {
    fn from(r: RangeSpec<'a>) -> Self {
        ZsetCmd::Range(r)
    }
}

fn parse_add<'a>(args: &[&'a [u8]]) -> Result<ZsetCmd<'a>, String> {
    let mut flags = AddFlags::default();
    let mut i = 0;
    while let Some(opt) = args.get(i) {
        let f = match opt.to_ascii_uppercase().as_slice() {
            b"NX" => &mut flags.nx,
            b"XX" => &mut flags.xx,
            b"GT" => &mut flags.gt,
            b"LT" => &mut flags.lt,
            b"CH" => &mut flags.ch,
            b"INCR" => &mut flags.incr,
            _ => break,
        };
        *f = true;
        i += 1;
    }
    let rest = &args[i..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(SYNTAX.into());
    }
    if flags.nx && flags.xx {
        return Err("XX and NX options at the same time are not compatible".into());
    }
    if ((flags.gt || flags.lt) && flags.nx) || (flags.gt && flags.lt) {
        return Err("GT, LT, and/or NX options at the same time are not compatible".into());
    }
    if flags.incr && rest.len() > 2 {
        return Err("INCR option supports a single increment-element pair".into());
    }
    let pairs = rest
        .chunks(2)
        .map(|p| Ok((score_arg(p[0])?, p[1])))
        .collect::<Result<_, String>>()?;
    Ok(ZsetCmd::Add { flags, pairs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<ZsetCmd<'_>, String> {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_zset(words[0], &words[1..])
    }

    #[test]
    fn zadd_flags_and_errors() {
        let Ok(ZsetCmd::Add { flags, pairs }) = parse("ZADD nx ch 1 a 2.5 b") else {
            panic!()
        };
        assert!(flags.nx && flags.ch && !flags.xx);
        assert_eq!(pairs, vec![(1.0, &b"a"[..]), (2.5, &b"b"[..])]);
        assert_eq!(
            parse("ZADD NX XX 1 a").unwrap_err(),
            "XX and NX options at the same time are not compatible"
        );
        assert!(parse("ZADD GT LT 1 a").unwrap_err().starts_with("GT, LT"));
        assert_eq!(parse("ZADD 1 a 2").unwrap_err(), SYNTAX);
        assert_eq!(parse("ZADD nan a").unwrap_err(), NOT_FLOAT);
        assert!(parse("ZADD INCR 1 a 2 b")
            .unwrap_err()
            .starts_with("INCR option"));
        assert!(parse("ZADD x").unwrap_err().starts_with("wrong number"));
    }

    #[test]
    fn zrange_options_in_redis_order() {
        let Ok(ZsetCmd::Range(r)) = parse("ZRANGE (5 -inf BYSCORE REV LIMIT 1 2 WITHSCORES") else {
            panic!()
        };
        assert_eq!(
            r.by,
            RangeBy::Score(Bound::Included(f64::NEG_INFINITY), Bound::Excluded(5.0))
        );
        assert!(r.rev && r.withscores);
        assert_eq!((r.offset, r.limit), (1, 2));
        assert!(parse("ZRANGE 0 1 LIMIT 0 1")
            .unwrap_err()
            .contains("LIMIT is only"));
        assert!(parse("ZRANGE - + BYLEX WITHSCORES")
            .unwrap_err()
            .contains("WITHSCORES"));
        assert_eq!(parse("ZRANGE a b BYSCORE").unwrap_err(), BAD_SCORE_RANGE);
        assert_eq!(parse("ZRANGE a b BYLEX").unwrap_err(), BAD_LEX_RANGE);
        assert_eq!(parse("ZRANGEBYSCORE 0 1 REV").unwrap_err(), SYNTAX);
        assert_eq!(
            parse("ZRANGE x 1").unwrap_err(),
            super::super::coll::NOT_INTEGER
        );
        let Ok(ZsetCmd::Range(r)) = parse("ZREVRANGEBYLEX + [b") else {
            panic!()
        };
        assert_eq!(r.by, RangeBy::Lex(LexBound::Incl(b"b"), LexBound::Max));
    }
}
