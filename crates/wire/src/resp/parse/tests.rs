//! Tests of the command parser: every form, every error, limits, prefixes.

use super::*;
use proptest::prelude::*;

/// A parse result with the arguments copied out.
type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, ParseError>;

fn parse(buf: &[u8]) -> Parsed {
    parse_with(buf, &Limits::default())
}

fn parse_with(buf: &[u8], limits: &Limits) -> Parsed {
    let mut args = Args::new();
    let consumed = parse_command(buf, limits, &mut args)?;
    Ok(consumed.map(|n| (args.iter(buf).map(<[u8]>::to_vec).collect(), n)))
}

fn ok(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
    parse(buf).unwrap().unwrap()
}

fn vecs(items: &[&[u8]]) -> Vec<Vec<u8>> {
    items.iter().map(|a| a.to_vec()).collect()
}

fn multibulk(items: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for item in items {
        out.extend_from_slice(format!("${}\r\n", item.len()).as_bytes());
        out.extend_from_slice(item);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn protocol(text: &str) -> Parsed {
    Err(ParseError::Protocol(text.to_owned()))
}

fn too_large(text: &str) -> Parsed {
    Err(ParseError::TooLarge(text.to_owned()))
}

#[test]
fn multibulk_command() {
    let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nx!\r\n";
    assert_eq!(ok(buf), (vecs(&[b"SET", b"k", b"v\r\nx!"]), buf.len()));
    let buf = b"*2\r\n$0\r\n\r\n$4\r\n\0\xff\r\n\r\n";
    assert_eq!(ok(buf), (vecs(&[b"", b"\0\xff\r\n"]), buf.len()));
}

#[test]
fn multibulk_arguments_are_ranges_of_the_input() {
    let buf = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
    let mut args = Args::new();
    assert_eq!(
        parse_command(buf, &Limits::default(), &mut args),
        Ok(Some(buf.len()))
    );
    assert_eq!(args.len(), 2);
    assert_eq!(args.range(0), Some(8..11));
    assert_eq!(args.range(1), Some(17..20));
    assert_eq!(args.range(2), None);
    assert_eq!(args.get(buf, 1), Some(&b"key"[..]));
    assert_eq!(args.get(buf, 2), None);
    // A different, shorter buffer cannot resolve the ranges.
    assert_eq!(args.get(b"*2", 1), None);
    assert_eq!(args.iter(b"*2").collect::<Vec<_>>(), vec![b"", b""]);
}

#[test]
fn empty_multibulk_commands() {
    assert_eq!(ok(b"*0\r\n"), (vec![], 4));
    assert_eq!(ok(b"*-1\r\n"), (vec![], 5));
    // Redis treats every non-positive count as an empty command.
    assert_eq!(ok(b"*-7\r\n$3\r\n"), (vec![], 5));
}

#[test]
fn pipelined_commands_parse_one_after_another() {
    let mut buf = multibulk(&[b"PING"]);
    buf.extend_from_slice(b"GET k\r\n");
    buf.extend_from_slice(&multibulk(&[b"SET", b"a", b"b"]));
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(b"ECHO \"x y\"\n");
    let mut args = Args::new();
    let mut pos = 0;
    let mut seen = Vec::new();
    while pos < buf.len() {
        let rest = &buf[pos..];
        let n = parse_command(rest, &Limits::default(), &mut args)
            .unwrap()
            .unwrap();
        seen.push(args.iter(rest).map(<[u8]>::to_vec).collect::<Vec<_>>());
        pos += n;
    }
    assert_eq!(pos, buf.len());
    assert_eq!(
        seen,
        vec![
            vecs(&[b"PING"]),
            vecs(&[b"GET", b"k"]),
            vecs(&[b"SET", b"a", b"b"]),
            vec![],
            vecs(&[b"ECHO", b"x y"]),
        ]
    );
}

#[test]
fn multibulk_errors() {
    let cases: &[(&[u8], &str)] = &[
        (b"*abc\r\n", "invalid multibulk length"),
        (b"*a", "invalid multibulk length"),
        (b"*\r\n", "invalid multibulk length"),
        (b"*01\r\n", "invalid multibulk length"),
        (b"*+1\r\n", "invalid multibulk length"),
        (b"* 1\r\n", "invalid multibulk length"),
        (b"*1 \r\n", "invalid multibulk length"),
        (b"*-0\r\n", "invalid multibulk length"),
        (b"*-\r\n", "invalid multibulk length"),
        (b"*1\n", "invalid multibulk length"),
        (b"*1\rX", "invalid multibulk length"),
        (b"*99999999999999999999\r\n", "invalid multibulk length"),
        (b"*1\r\nx", "expected '$', got 'x'"),
        (b"*1\r\n*1\r\n", "expected '$', got '*'"),
        (b"*1\r\n\r\n", "expected '$', got '\\x0d'"),
        (b"*2\r\n$1\r\na\r\n:1\r\n", "expected '$', got ':'"),
        (b"*1\r\n$abc\r\n", "invalid bulk length"),
        (b"*1\r\n$-1\r\n", "invalid bulk length"),
        (b"*1\r\n$\r\n", "invalid bulk length"),
        (b"*1\r\n$03\r\nabc\r\n", "invalid bulk length"),
        (b"*1\r\n$+3\r\nabc\r\n", "invalid bulk length"),
        (b"*1\r\n$3 \r\nabc\r\n", "invalid bulk length"),
        (b"*1\r\n$3\nabc\r\n", "invalid bulk length"),
        (b"*1\r\n$3\r\nabcXY", "expected CRLF after bulk data"),
        (b"*1\r\n$3\r\nabcX", "expected CRLF after bulk data"),
        (b"*1\r\n$3\r\nabc\rX", "expected CRLF after bulk data"),
        (b"*1\r\n$3\r\nabc\n", "expected CRLF after bulk data"),
        (b"*1\r\n$3\r\nabcd\r\n", "expected CRLF after bulk data"),
    ];
    for (input, text) in cases {
        assert_eq!(
            parse(input),
            protocol(text),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn limits_are_enforced() {
    let limits = Limits {
        max_bulk_len: 5,
        max_args: 2,
        max_inline_len: 8,
        ..Limits::DEFAULT
    };
    let p = |b: &[u8]| parse_with(b, &limits);
    assert_eq!(p(b"*3\r\n"), too_large("invalid multibulk length"));
    assert_eq!(p(b"*1\r\n$6\r\n"), too_large("invalid bulk length"));
    assert!(p(b"*2\r\n$5\r\nabcde\r\n$0\r\n\r\n").unwrap().is_some());
    // Inline: 8 bytes of line are fine, 9 are not, with or without the newline.
    assert_eq!(p(b"12345678\r\n").unwrap().unwrap().1, 10);
    assert_eq!(p(b"12345678\n").unwrap().unwrap().1, 9);
    assert_eq!(p(b"12345678\r"), Ok(None));
    assert_eq!(p(b"123456789"), too_large("too big inline request"));
    assert_eq!(p(b"123456789\r"), too_large("too big inline request"));
    assert_eq!(p(b"123456789\n"), too_large("too big inline request"));
    assert_eq!(p(b"1234567890"), too_large("too big inline request"));
    assert_eq!(
        p(b"a b c\r\n"),
        too_large("too many arguments in inline request")
    );
    assert_eq!(
        p(b"\"a\" b c\n"),
        too_large("too many arguments in inline request")
    );

    let defaults = Limits::default();
    assert_eq!(defaults.max_bulk_len, 512 << 20);
    assert_eq!(defaults.max_args, 1_048_576);
    assert_eq!(defaults.max_inline_len, 65_536);
    assert_eq!(defaults.max_request_len, 1 << 30);
    assert_eq!(
        parse(b"*1048577\r\n"),
        too_large("invalid multibulk length")
    );
    assert_eq!(
        parse(b"*1\r\n$536870913\r\n"),
        too_large("invalid bulk length")
    );
    assert_eq!(parse(b"*1048576\r\n$1\r\n"), Ok(None));
    assert_eq!(parse(b"*1\r\n$536870912\r\n"), Ok(None));
    let long = vec![b'a'; 65_537];
    assert_eq!(parse(&long), too_large("too big inline request"));
    // A huge length that fits an i64 but not the limit, with limits of usize::MAX (the
    // bulk string's and the whole command's).
    let unlimited = Limits {
        max_bulk_len: usize::MAX,
        max_request_len: usize::MAX,
        ..Limits::default()
    };
    assert_eq!(
        parse_with(b"*1\r\n$9223372036854775807\r\n", &unlimited),
        Ok(None)
    );
}

#[test]
fn error_display() {
    let e = ParseError::Protocol("invalid bulk length".into());
    assert_eq!(e.to_string(), "Protocol error: invalid bulk length");
    assert_eq!(e.text(), "invalid bulk length");
    let e = ParseError::TooLarge("too big inline request".into());
    assert_eq!(e.to_string(), "Protocol error: too big inline request");
}

#[test]
fn inline_commands() {
    assert_eq!(ok(b"PING\r\n"), (vecs(&[b"PING"]), 6));
    assert_eq!(ok(b"PING\n"), (vecs(&[b"PING"]), 5));
    assert_eq!(ok(b"\r\n"), (vec![], 2));
    assert_eq!(ok(b"\n"), (vec![], 1));
    assert_eq!(ok(b" \t \x0b\x0c\r\n"), (vec![], 7));
    assert_eq!(
        ok(b"  SET\tkey   value  \r\nGET"),
        (vecs(&[b"SET", b"key", b"value"]), 21)
    );
    // A lone \r inside the line separates arguments; \v does so only between them.
    assert_eq!(ok(b"a\rb\n"), (vecs(&[b"a", b"b"]), 4));
    assert_eq!(ok(b"a\x0bb \x0bc\n"), (vecs(&[b"a\x0bb", b"c"]), 7));
    // Binary bytes and a NUL are ordinary bytes.
    assert_eq!(ok(b"a\0b \xff\n"), (vecs(&[b"a\0b", b"\xff"]), 6));
}

#[test]
fn inline_quoting() {
    let cases: &[(&[u8], &[&[u8]])] = &[
        (b"SET \"a b\" 'c d'\r\n", &[b"SET", b"a b", b"c d"]),
        (b"\"\" ''\n", &[b"", b""]),
        (
            b"\"\\x41\\x7a\\xff\\n\\r\\t\\b\\a\\\\\\\"\\q\"\n",
            &[b"Az\xff\n\r\t\x08\x07\\\"q"],
        ),
        // \x needs two hex digits, otherwise it is just an escaped 'x'.
        (b"\"\\x4g\" \"\\x\"\n", &[b"x4g", b"x"]),
        (b"'it\\'s' 'a\\b\\n\"'\n", &[b"it's", b"a\\b\\n\""]),
        (b"foo\"bar baz\" x\n", &[b"foobar baz", b"x"]),
        (b"foo'bar baz'\n", &[b"foobar baz"]),
        (b"\"a\"\t\"b\"\x0b'c'\n", &[b"a", b"b", b"c"]),
        (b"\"a\r\"\r\n", &[b"a\r"]),
        (b"x\"\n", &[]),
    ];
    for (input, expected) in cases {
        if expected.is_empty() {
            assert_eq!(parse(input), protocol("unbalanced quotes in request"));
        } else {
            assert_eq!(
                ok(input),
                (vecs(expected), input.len()),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }
}

#[test]
fn inline_quote_errors() {
    let cases: &[&[u8]] = &[
        b"SET \"a\r\n",
        b"SET 'a\r\n",
        b"\"a\"b\n",
        b"'a'b\n",
        b"\"a\"\"b\"\n",
        b"\"a\\\"\n",
        b"'a\\'\n",
        b"\"\\\n",
    ];
    for input in cases {
        assert_eq!(
            parse(input),
            protocol("unbalanced quotes in request"),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn quoted_arguments_live_in_scratch() {
    let buf = b"SET \"k\" v\n";
    let mut args = Args::new();
    parse_command(buf, &Limits::default(), &mut args).unwrap();
    assert_eq!(args.range(0), Some(0..3));
    assert_eq!(args.range(1), None);
    assert_eq!(args.range(2), Some(8..9));
    assert_eq!(args.get(buf, 1), Some(&b"k"[..]));
    // Reuse clears the previous command, scratch included.
    let buf = b"'x' \"yz\"\n";
    parse_command(buf, &Limits::default(), &mut args).unwrap();
    assert_eq!(
        args.iter(buf).collect::<Vec<_>>(),
        vec![b"x" as &[u8], b"yz"]
    );
    // An incomplete or bad command leaves `args` empty.
    assert_eq!(
        parse_command(b"GET", &Limits::default(), &mut args),
        Ok(None)
    );
    assert!(args.is_empty());
    parse_command(buf, &Limits::default(), &mut args).unwrap();
    assert!(parse_command(b"*1\r\n$1\r\nab", &Limits::default(), &mut args).is_err());
    assert!(args.is_empty());
}

#[test]
fn shrinking_keeps_the_arguments() {
    let buf = multibulk(&[&b"a"[..]; 1000]);
    let mut args = Args::with_capacity(4);
    parse_command(&buf, &Limits::default(), &mut args).unwrap();
    assert!(args.spans.capacity() >= 1000);
    let buf = b"GET \"k\"\n";
    parse_command(buf, &Limits::default(), &mut args).unwrap();
    args.shrink_to(8, 16);
    assert!(args.spans.capacity() < 1000);
    assert_eq!(
        args.iter(buf).collect::<Vec<_>>(),
        vec![b"GET" as &[u8], b"k"]
    );
}

#[test]
fn every_prefix_of_a_valid_command_is_incomplete() {
    let commands: Vec<Vec<u8>> = vec![
        multibulk(&[b"SET", b"key", b"value"]),
        multibulk(&[b""]),
        multibulk(&[b"\r\n\r\n", b"x"]),
        b"*0\r\n".to_vec(),
        b"*-1\r\n".to_vec(),
        b"PING\r\n".to_vec(),
        b"SET \"a\\x41\" 'b c'\r\n".to_vec(),
        b"\r\n".to_vec(),
        b"\n".to_vec(),
    ];
    for cmd in &commands {
        for end in 0..cmd.len() {
            assert_eq!(parse(&cmd[..end]), Ok(None), "{:?}", &cmd[..end]);
        }
        assert_eq!(parse(cmd).unwrap().unwrap().1, cmd.len());
    }
}

/// Bytes that look like RESP often enough to reach deep into the parser.
fn resp_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"*".to_vec()),
        Just(b"$".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"'".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"\\x".to_vec()),
        Just(b" ".to_vec()),
        Just(b"-".to_vec()),
        (0u32..30).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..4),
    ];
    proptest::collection::vec(token, 0..40).prop_map(|parts| parts.concat())
}

fn check_prefix_consistency(buf: &[u8], limits: &Limits) {
    let full = parse_with(buf, limits);
    if let Ok(Some((_, n))) = full {
        assert!(n > 0 && n <= buf.len());
        // The command does not depend on what follows it.
        assert_eq!(parse_with(&buf[..n], limits), full);
    }
    for end in 0..buf.len() {
        let part = parse_with(&buf[..end], limits);
        match (&part, &full) {
            (Ok(None), _) => {}
            (Ok(Some((_, n))), _) => {
                assert!(*n <= end);
                assert_eq!(&part, &full);
            }
            (Err(_), _) => assert_eq!(&part, &full),
        }
    }
}

proptest! {
    #[test]
    fn multibulk_round_trip(
        commands in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..12),
            1..4,
        )
    ) {
        let mut buf = Vec::new();
        for cmd in &commands {
            let refs: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
            buf.extend_from_slice(&multibulk(&refs));
        }
        let mut args = Args::new();
        let mut pos = 0;
        for cmd in &commands {
            let rest = &buf[pos..];
            let n = parse_command(rest, &Limits::default(), &mut args).unwrap().unwrap();
            let got: Vec<Vec<u8>> = args.iter(rest).map(<[u8]>::to_vec).collect();
            prop_assert_eq!(&got, cmd);
            for (i, arg) in cmd.iter().enumerate() {
                prop_assert_eq!(args.get(rest, i), Some(&arg[..]));
                prop_assert!(args.range(i).is_some());
            }
            // Every strict prefix of the command is incomplete.
            for end in 0..n {
                prop_assert_eq!(
                    parse_command(&rest[..end], &Limits::default(), &mut args),
                    Ok(None)
                );
            }
            pos += n;
        }
        prop_assert_eq!(pos, buf.len());
    }

    #[test]
    fn inline_round_trip(
        words in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..6)
    ) {
        // Quote every word with escapes, as redis-cli would print it.
        let mut line = Vec::new();
        for word in &words {
            line.push(b'"');
            for &b in word {
                match b {
                    b'"' | b'\\' => line.extend_from_slice(&[b'\\', b]),
                    b'\n' => line.extend_from_slice(b"\\n"),
                    0x20..=0x7e => line.push(b),
                    _ => line.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                }
            }
            line.extend_from_slice(b"\" ");
        }
        line.extend_from_slice(b"\r\n");
        let (got, n) = parse(&line).unwrap().unwrap();
        prop_assert_eq!(got, words);
        prop_assert_eq!(n, line.len());
    }

    #[test]
    fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut args = Args::new();
        match parse_command(&buf, &Limits::default(), &mut args) {
            Ok(Some(n)) => {
                prop_assert!(n > 0 && n <= buf.len());
                for i in 0..args.len() {
                    prop_assert!(args.get(&buf, i).is_some());
                }
            }
            Ok(None) => prop_assert!(args.is_empty()),
            Err(_) => prop_assert!(args.is_empty()),
        }
    }

    #[test]
    fn resp_like_bytes_are_prefix_consistent(buf in resp_like_bytes()) {
        check_prefix_consistency(&buf, &Limits::default());
        let tight = Limits { max_bulk_len: 8, max_args: 3, max_inline_len: 10, max_request_len: 40 };
        check_prefix_consistency(&buf, &tight);
    }
}
