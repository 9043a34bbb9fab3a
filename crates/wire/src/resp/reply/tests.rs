//! Tests of the reply parser: every type, partial input, hostile nesting, and properties
//! (any encoded reply parses back; no input panics).
#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use super::super::encode::Version;
use super::super::parse::{parse_command, Args};
use super::*;
use proptest::prelude::*;

fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, ParseError> {
    parse_reply(buf, &Limits::default())
}

/// Parses `buf` as exactly one reply, checking `skip_reply` and every prefix on the way.
fn one(buf: &[u8]) -> Reply {
    let (reply, n) = parse(buf).unwrap().unwrap();
    assert_eq!(n, buf.len(), "{:?}", String::from_utf8_lossy(buf));
    assert_eq!(skip_reply(buf, &Limits::default()), Ok(Some(n)));
    for end in 0..buf.len() {
        assert_eq!(parse(&buf[..end]), Ok(None), "{:?}", &buf[..end]);
        assert_eq!(skip_reply(&buf[..end], &Limits::default()), Ok(None));
    }
    reply
}

fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(Some(b.to_vec()))
}

fn simple(s: &str) -> Reply {
    Reply::Simple(s.as_bytes().to_vec())
}

fn protocol(text: &str) -> Result<Option<(Reply, usize)>, ParseError> {
    Err(ParseError::Protocol(text.to_owned()))
}

#[test]
fn resp2_types() {
    assert_eq!(one(b"+OK\r\n"), simple("OK"));
    assert_eq!(one(b"+\r\n"), simple(""));
    assert_eq!(
        one(b"-ERR unknown command\r\n"),
        Reply::Error(b"ERR unknown command".to_vec())
    );
    assert_eq!(one(b":0\r\n"), Reply::Integer(0));
    assert_eq!(one(b":-42\r\n"), Reply::Integer(-42));
    assert_eq!(one(b":+7\r\n"), Reply::Integer(7));
    assert_eq!(one(b":-9223372036854775808\r\n"), Reply::Integer(i64::MIN));
    assert_eq!(one(b":9223372036854775807\r\n"), Reply::Integer(i64::MAX));
    assert_eq!(one(b"$5\r\nhello\r\n"), bulk(b"hello"));
    assert_eq!(one(b"$0\r\n\r\n"), bulk(b""));
    assert_eq!(one(b"$4\r\n\r\n\r\n\r\n"), bulk(b"\r\n\r\n"));
    assert_eq!(one(b"$-1\r\n"), Reply::Bulk(None));
    assert_eq!(one(b"*-1\r\n"), Reply::Array(None));
    assert_eq!(one(b"*0\r\n"), Reply::Array(Some(vec![])));
    assert_eq!(
        one(b"*3\r\n:1\r\n$-1\r\n*2\r\n+a\r\n*0\r\n"),
        Reply::Array(Some(vec![
            Reply::Integer(1),
            Reply::Bulk(None),
            Reply::Array(Some(vec![simple("a"), Reply::Array(Some(vec![]))])),
        ]))
    );
}

#[test]
fn resp3_types() {
    assert_eq!(one(b"_\r\n"), Reply::Null);
    assert_eq!(one(b",1.5\r\n"), Reply::Double(1.5));
    assert_eq!(one(b",-3\r\n"), Reply::Double(-3.0));
    assert_eq!(one(b",1e+21\r\n"), Reply::Double(1e21));
    assert_eq!(one(b",inf\r\n"), Reply::Double(f64::INFINITY));
    assert_eq!(one(b",-inf\r\n"), Reply::Double(f64::NEG_INFINITY));
    assert!(matches!(one(b",nan\r\n"), Reply::Double(d) if d.is_nan()));
    assert_eq!(one(b"#t\r\n"), Reply::Boolean(true));
    assert_eq!(one(b"#f\r\n"), Reply::Boolean(false));
    assert_eq!(
        one(b"(3492890328409238509324850943850943825024385\r\n"),
        Reply::BigNumber(b"3492890328409238509324850943850943825024385".to_vec())
    );
    assert_eq!(one(b"(-12\r\n"), Reply::BigNumber(b"-12".to_vec()));
    assert_eq!(
        one(b"!21\r\nSYNTAX invalid syntax\r\n"),
        Reply::Error(b"SYNTAX invalid syntax".to_vec())
    );
    assert_eq!(
        one(b"=15\r\ntxt:Some string\r\n"),
        Reply::Verbatim {
            format: *b"txt",
            text: b"Some string".to_vec()
        }
    );
    assert_eq!(
        one(b"=4\r\nmkd:\r\n"),
        Reply::Verbatim {
            format: *b"mkd",
            text: vec![]
        }
    );
    assert_eq!(
        one(b"%2\r\n+first\r\n:1\r\n+second\r\n_\r\n"),
        Reply::Map(vec![
            (simple("first"), Reply::Integer(1)),
            (simple("second"), Reply::Null),
        ])
    );
    assert_eq!(one(b"%0\r\n"), Reply::Map(vec![]));
    assert_eq!(
        one(b"~2\r\n+a\r\n#f\r\n"),
        Reply::Set(vec![simple("a"), Reply::Boolean(false)])
    );
    assert_eq!(
        one(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"),
        Reply::Push(vec![bulk(b"message"), bulk(b"ch"), bulk(b"hi")])
    );
}

#[test]
fn attributes_annotate_the_next_reply() {
    let attrs = || vec![(simple("ttl"), Reply::Integer(3))];
    assert_eq!(
        one(b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n"),
        Reply::Attribute {
            attrs: attrs(),
            reply: Box::new(bulk(b"v"))
        }
    );
    // Inside an aggregate, an attribute is not an element of its own.
    assert_eq!(
        one(b"*2\r\n:1\r\n|1\r\n+ttl\r\n:3\r\n*1\r\n:2\r\n"),
        Reply::Array(Some(vec![
            Reply::Integer(1),
            Reply::Attribute {
                attrs: attrs(),
                reply: Box::new(Reply::Array(Some(vec![Reply::Integer(2)])))
            }
        ]))
    );
    // Consecutive attributes merge; an empty one annotates with nothing.
    assert_eq!(
        one(b"|1\r\n+ttl\r\n:3\r\n|0\r\n|1\r\n+k\r\n+v\r\n:5\r\n"),
        Reply::Attribute {
            attrs: vec![
                (simple("ttl"), Reply::Integer(3)),
                (simple("k"), simple("v"))
            ],
            reply: Box::new(Reply::Integer(5))
        }
    );
    // Attribute values may be aggregates with attributes of their own.
    assert_eq!(
        one(b"|1\r\n+a\r\n|1\r\n+b\r\n+c\r\n*0\r\n+OK\r\n"),
        Reply::Attribute {
            attrs: vec![(
                simple("a"),
                Reply::Attribute {
                    attrs: vec![(simple("b"), simple("c"))],
                    reply: Box::new(Reply::Array(Some(vec![])))
                }
            )],
            reply: Box::new(simple("OK"))
        }
    );
    // An attribute alone is not a reply yet.
    assert_eq!(parse(b"|1\r\n+ttl\r\n:3\r\n"), Ok(None));
    assert_eq!(
        parse(b"*?\r\n|1\r\n+ttl\r\n:3\r\n.\r\n"),
        protocol("attribute without a reply")
    );
}

#[test]
fn streamed_replies() {
    assert_eq!(
        one(b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;2\r\nld\r\n;0\r\n"),
        bulk(b"Hello world")
    );
    assert_eq!(one(b"$?\r\n;0\r\n"), bulk(b""));
    assert_eq!(
        one(b"*?\r\n:1\r\n*?\r\n.\r\n$?\r\n;1\r\nx\r\n;0\r\n.\r\n"),
        Reply::Array(Some(vec![
            Reply::Integer(1),
            Reply::Array(Some(vec![])),
            bulk(b"x")
        ]))
    );
    assert_eq!(
        one(b"%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n"),
        Reply::Map(vec![
            (simple("a"), Reply::Integer(1)),
            (simple("b"), Reply::Integer(2))
        ])
    );
    assert_eq!(one(b"~?\r\n.\r\n"), Reply::Set(vec![]));
    assert_eq!(one(b">?\r\n+x\r\n.\r\n"), Reply::Push(vec![simple("x")]));
    assert_eq!(
        parse(b"%?\r\n+a\r\n.\r\n"),
        protocol("map without a value for its last key")
    );
    assert_eq!(parse(b".\r\n"), protocol("unexpected end of aggregate"));
    assert_eq!(
        parse(b"*2\r\n:1\r\n.\r\n"),
        protocol("unexpected end of aggregate")
    );
    assert_eq!(
        parse(b"$?\r\n:1\r\n"),
        protocol("expected ';' in streamed string")
    );
    assert_eq!(parse(b"$?\r\n;x\r\n"), protocol("invalid chunk length"));
    assert_eq!(parse(b"$?\r\n;-1\r\n"), protocol("invalid chunk length"));
    assert_eq!(
        parse(b"$?\r\n;1\r\nab"),
        protocol("expected CRLF after bulk data")
    );
    let small = Limits {
        max_bulk_len: 4,
        ..Limits::default()
    };
    assert_eq!(
        parse_reply(b"$?\r\n;3\r\nabc\r\n;2\r\n", &small),
        Err(ParseError::TooLarge("invalid bulk length".into()))
    );
}

#[test]
fn malformed_replies() {
    let cases: &[(&[u8], &str)] = &[
        (b"@x\r\n", "invalid reply type byte '@'"),
        (b"\r\n", "invalid reply type byte '\\x0d'"),
        (b"+OK\n", "expected CRLF at end of line"),
        (b"+OK\rX", "expected CRLF at end of line"),
        (b"-ERR\n", "expected CRLF at end of line"),
        (b":\r\n", "invalid integer"),
        (b":12a\r\n", "invalid integer"),
        (b":-\r\n", "invalid integer"),
        (b": 1\r\n", "invalid integer"),
        (b":9223372036854775808\r\n", "invalid integer"),
        (b":1\n", "invalid integer"),
        (b"$-2\r\n", "invalid bulk length"),
        (b"$01\r\na\r\n", "invalid bulk length"),
        (b"$+1\r\na\r\n", "invalid bulk length"),
        (b"$\r\n", "invalid bulk length"),
        (b"$1x\r\n", "invalid bulk length"),
        (b"$3\r\nabcX", "expected CRLF after bulk data"),
        (b"$3\r\nabc\rX", "expected CRLF after bulk data"),
        (b"!-1\r\n", "invalid bulk length"),
        (b"=-1\r\n", "invalid bulk length"),
        (b"!?\r\n", "invalid bulk length"),
        (b"=3\r\ntxt\r\n", "invalid verbatim string"),
        (b"=5\r\ntxtx1\r\n", "invalid verbatim string"),
        (b"*-2\r\n", "invalid multibulk length"),
        (b"%-1\r\n", "invalid multibulk length"),
        (b"~x\r\n", "invalid multibulk length"),
        (b"*1 \r\n", "invalid multibulk length"),
        (b"_x\r\n", "invalid null"),
        (b"#x\r\n", "invalid boolean"),
        (b"#\r\n", "invalid boolean"),
        (b",\r\n", "invalid double"),
        (b",abc\r\n", "invalid double"),
        (b"(\r\n", "invalid big number"),
        (b"(12a\r\n", "invalid big number"),
        (b".x\r\n", "invalid end marker"),
        (b"*1\r\n;1\r\n", "invalid reply type byte ';'"),
    ];
    for (input, text) in cases {
        assert_eq!(
            parse(input),
            protocol(text),
            "{:?}",
            String::from_utf8_lossy(input)
        );
        assert_eq!(
            skip_reply(input, &Limits::default()),
            Err(ParseError::protocol(text))
        );
    }
    // A number line never needs more than MAX_NUMBER_LINE bytes.
    let long = vec![b'1'; 200];
    assert_eq!(
        parse(&[&b":"[..], &long].concat()),
        protocol("invalid integer")
    );
}

#[test]
fn limits_apply_to_replies() {
    let limits = Limits {
        max_bulk_len: 4,
        max_args: 2,
        max_inline_len: 0,
        ..Limits::DEFAULT
    };
    let too_large = |text: &str| Err(ParseError::TooLarge(text.to_owned()));
    let p = |b: &[u8]| parse_reply(b, &limits);
    assert!(p(b"$4\r\nabcd\r\n").unwrap().is_some());
    assert_eq!(p(b"$5\r\n"), too_large("invalid bulk length"));
    assert_eq!(p(b"=9\r\n"), too_large("invalid bulk length"));
    assert!(p(b"*2\r\n:1\r\n:2\r\n").unwrap().is_some());
    assert!(p(b"%2\r\n:1\r\n:2\r\n:3\r\n:4\r\n").unwrap().is_some());
    assert_eq!(p(b"*3\r\n"), too_large("invalid multibulk length"));
    assert_eq!(p(b"%3\r\n"), too_large("invalid multibulk length"));
    assert!(p(b"+abcd\r\n").unwrap().is_some());
    assert_eq!(p(b"+abcd"), Ok(None));
    assert_eq!(p(b"+abcde"), too_large("line too long"));
    assert_eq!(p(b"+abcde\r\n"), too_large("line too long"));
}

#[test]
fn nesting_is_limited_without_recursion() {
    let nested = |depth: usize| {
        let mut buf = b"*1\r\n".repeat(depth);
        buf.extend_from_slice(b":1\r\n");
        buf
    };
    let (reply, n) = parse(&nested(MAX_REPLY_DEPTH)).unwrap().unwrap();
    assert_eq!(n, MAX_REPLY_DEPTH * 4 + 4);
    let mut depth = 0;
    let mut cur = &reply;
    while let Reply::Array(Some(items)) = cur {
        depth += 1;
        cur = &items[0];
    }
    assert_eq!((depth, cur), (MAX_REPLY_DEPTH, &Reply::Integer(1)));
    let too_deep = protocol("reply nested too deeply");
    assert_eq!(parse(&nested(MAX_REPLY_DEPTH + 1)), too_deep);
    assert_eq!(parse(&nested(1_000_000)), too_deep);
    assert_eq!(parse(&b"|1\r\n".repeat(100_000)), too_deep);
    assert_eq!(parse(&b"*?\r\n".repeat(100_000)), too_deep);
    assert_eq!(parse(&b"*1\r\n".repeat(MAX_REPLY_DEPTH)), Ok(None));
    // Deep but within the limit, and wider than the inline frame stack.
    let mut buf = b"*2\r\n".repeat(40);
    buf.extend_from_slice(&b":1\r\n".repeat(41));
    assert_eq!(skip_reply(&buf, &Limits::default()), Ok(Some(buf.len())));
    assert_eq!(parse(&buf).unwrap().unwrap().1, buf.len());
}

#[test]
fn pipelined_replies() {
    let buf = b"+OK\r\n:1\r\n$-1\r\n*1\r\n$1\r\na\r\n_\r\n";
    let mut pos = 0;
    let mut replies = Vec::new();
    while pos < buf.len() {
        let n = skip_reply(&buf[pos..], &Limits::default())
            .unwrap()
            .unwrap();
        let (reply, m) = parse(&buf[pos..]).unwrap().unwrap();
        assert_eq!(n, m);
        replies.push(reply);
        pos += n;
    }
    assert_eq!(
        replies,
        vec![
            simple("OK"),
            Reply::Integer(1),
            Reply::Bulk(None),
            Reply::Array(Some(vec![bulk(b"a")])),
            Reply::Null
        ]
    );
}

#[test]
fn command_encoding() {
    let mut out = Vec::new();
    command(&mut out, &[b"SET", b"key", b"a\r\nb"]);
    assert_eq!(
        out,
        b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$4\r\na\r\nb\r\n".to_vec()
    );
    let mut args = Args::new();
    let n = parse_command(&out, &Limits::default(), &mut args).unwrap();
    assert_eq!(n, Some(out.len()));
    assert_eq!(
        args.iter(&out).collect::<Vec<_>>(),
        vec![b"SET" as &[u8], b"key", b"a\r\nb"]
    );
    out.clear();
    command(&mut out, &[]);
    assert_eq!(out, b"*0\r\n");
}

/// What a server writes with the `encode` functions, for the round-trip tests.
#[derive(Debug, Clone)]
enum Value {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Null,
    NullArray,
    Double(f64),
    Boolean(bool),
    Verbatim(Vec<u8>),
    Array(Vec<Value>),
    Set(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Push(Vec<Value>),
}

fn emit(out: &mut Vec<u8>, value: &Value, v: Version) {
    match value {
        Value::Simple(s) => encode::simple(out, s),
        Value::Error(e) => encode::error(out, e),
        Value::Integer(n) => encode::integer(out, *n),
        Value::Bulk(b) => encode::bulk(out, b),
        Value::Null => encode::null(out, v),
        Value::NullArray => encode::null_array(out, v),
        Value::Double(d) => encode::double(out, *d, v),
        Value::Boolean(b) => encode::boolean(out, *b, v),
        Value::Verbatim(t) => encode::verbatim(out, t, v),
        Value::Array(items) => {
            encode::array_header(out, items.len());
            items.iter().for_each(|i| emit(out, i, v));
        }
        Value::Set(items) => {
            encode::set_header(out, items.len(), v);
            items.iter().for_each(|i| emit(out, i, v));
        }
        Value::Push(items) => {
            encode::push_header(out, items.len(), v);
            items.iter().for_each(|i| emit(out, i, v));
        }
        Value::Map(pairs) => {
            encode::map_header(out, pairs.len(), v);
            for (k, val) in pairs {
                emit(out, k, v);
                emit(out, val, v);
            }
        }
    }
}

/// The reply a client should read for `value` sent with version `v`.
fn expected(value: &Value, v: Version) -> Reply {
    let resp3 = v == Version::Resp3;
    let all = |items: &[Value]| items.iter().map(|i| expected(i, v)).collect::<Vec<_>>();
    match value {
        Value::Simple(s) => Reply::Simple(s.as_bytes().to_vec()),
        Value::Error(e) => Reply::Error(e.as_bytes().to_vec()),
        Value::Integer(n) => Reply::Integer(*n),
        Value::Bulk(b) => Reply::Bulk(Some(b.clone())),
        Value::Null if resp3 => Reply::Null,
        Value::Null => Reply::Bulk(None),
        Value::NullArray if resp3 => Reply::Null,
        Value::NullArray => Reply::Array(None),
        Value::Double(d) if resp3 => Reply::Double(*d),
        Value::Double(d) => {
            let mut out = Vec::new();
            encode::double(&mut out, *d, Version::Resp3);
            Reply::Bulk(Some(out[1..out.len() - 2].to_vec()))
        }
        Value::Boolean(b) if resp3 => Reply::Boolean(*b),
        Value::Boolean(b) => Reply::Integer(i64::from(*b)),
        Value::Verbatim(t) if resp3 => Reply::Verbatim {
            format: *b"txt",
            text: t.clone(),
        },
        Value::Verbatim(t) => Reply::Bulk(Some(t.clone())),
        Value::Array(items) => Reply::Array(Some(all(items))),
        Value::Set(items) if resp3 => Reply::Set(all(items)),
        Value::Push(items) if resp3 => Reply::Push(all(items)),
        Value::Set(items) | Value::Push(items) => Reply::Array(Some(all(items))),
        Value::Map(pairs) if resp3 => Reply::Map(
            pairs
                .iter()
                .map(|(k, val)| (expected(k, v), expected(val, v)))
                .collect(),
        ),
        Value::Map(pairs) => Reply::Array(Some(
            pairs
                .iter()
                .flat_map(|(k, val)| [expected(k, v), expected(val, v)])
                .collect(),
        )),
    }
}

fn value_strategy() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        "[a-zA-Z0-9 ]{0,12}".prop_map(Value::Simple),
        "(ERR|WRONGTYPE|NOSCRIPT) [a-z ]{0,12}".prop_map(Value::Error),
        any::<i64>().prop_map(Value::Integer),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::Bulk),
        Just(Value::Null),
        Just(Value::NullArray),
        any::<f64>()
            .prop_filter("NaN is not equal to itself", |d| !d.is_nan())
            .prop_map(Value::Double),
        any::<bool>().prop_map(Value::Boolean),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::Verbatim),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let items = proptest::collection::vec(inner.clone(), 0..6);
        prop_oneof![
            items.clone().prop_map(Value::Array),
            items.clone().prop_map(Value::Set),
            items.prop_map(Value::Push),
            proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Value::Map),
        ]
    })
}

/// Bytes that look like RESP often enough to reach deep into the parser.
fn resp_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        proptest::sample::select(vec![
            &b"*"[..],
            b"$",
            b"%",
            b"~",
            b"|",
            b">",
            b"+",
            b"-",
            b":",
            b",",
            b"#",
            b"_",
            b"(",
            b"=",
            b"!",
            b".",
            b";",
            b"?",
            b"\r\n",
            b"\r",
            b"\n",
            b"-1",
            b"txt:",
            b"inf",
        ])
        .prop_map(<[u8]>::to_vec),
        (0u32..12).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..3),
    ];
    proptest::collection::vec(token, 0..48).prop_map(|parts| parts.concat())
}

/// `parse_reply` and `skip_reply` agree, never panic, and are consistent on prefixes.
fn check_bytes(buf: &[u8], limits: &Limits) {
    let parsed = parse_reply(buf, limits);
    let skipped = skip_reply(buf, limits);
    match (&parsed, &skipped) {
        (Ok(Some((_, n))), Ok(Some(m))) => {
            assert_eq!(n, m);
            assert!(*n > 0 && *n <= buf.len());
        }
        (Ok(None), Ok(None)) => {}
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("parse {parsed:?} vs skip {skipped:?}"),
    }
    for end in 0..buf.len() {
        match skip_reply(&buf[..end], limits) {
            Ok(None) => {}
            other => assert_eq!(other, skipped, "prefix of {end} bytes"),
        }
    }
}

proptest! {
    #[test]
    fn round_trips_with_the_encoder(value in value_strategy()) {
        for v in [Version::Resp2, Version::Resp3] {
            let mut out = Vec::new();
            emit(&mut out, &value, v);
            let (reply, n) = parse(&out).unwrap().unwrap();
            prop_assert_eq!(n, out.len());
            prop_assert_eq!(&reply, &expected(&value, v));
            prop_assert_eq!(skip_reply(&out, &Limits::default()), Ok(Some(n)));
            for end in 0..out.len() {
                prop_assert_eq!(parse(&out[..end]), Ok(None));
            }
            // Followed by another reply, the first is still read alone.
            out.extend_from_slice(b"+next\r\n");
            prop_assert_eq!(parse(&out).unwrap().unwrap().1, n);
        }
    }

    #[test]
    fn commands_round_trip_through_the_server_parser(
        args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..32), 0..8)
    ) {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let mut out = Vec::new();
        command(&mut out, &refs);
        let mut parsed = Args::new();
        let n = parse_command(&out, &Limits::default(), &mut parsed).unwrap();
        prop_assert_eq!(n, Some(out.len()));
        prop_assert_eq!(parsed.iter(&out).collect::<Vec<_>>(), refs);
    }

    #[test]
    fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_bytes(&buf, &Limits::default());
    }

    #[test]
    fn resp_like_bytes_never_panic(buf in resp_like_bytes()) {
        check_bytes(&buf, &Limits::default());
        check_bytes(&buf, &Limits { max_bulk_len: 3, max_args: 2, max_inline_len: 0, ..Limits::DEFAULT });
    }
}
