//! Tests of [`CommandParser`]: resuming after `Ok(None)` gives what a whole buffer gives, in
//! linear work; and the whole-command size limit.

use super::*;
use proptest::prelude::*;

type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, ParseError>;

fn multibulk(items: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for item in items {
        out.extend_from_slice(format!("${}\r\n", item.len()).as_bytes());
        out.extend_from_slice(item);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn whole(buf: &[u8], limits: &Limits) -> Parsed {
    let mut args = Args::new();
    let n = parse_command(buf, limits, &mut args)?;
    Ok(n.map(|n| (args.iter(buf).map(<[u8]>::to_vec).collect(), n)))
}

/// Feeds `buf` to one parser in pieces ending at each of `cuts` (then the whole buffer),
/// as a connection's reads would; returns the first result that is not `Ok(None)` and the
/// bytes the parser examined.
fn in_pieces(buf: &[u8], cuts: &[usize], limits: &Limits) -> (Parsed, usize) {
    let mut parser = CommandParser::new();
    let mut args = Args::new();
    let ends = cuts.iter().map(|&c| c.min(buf.len())).chain([buf.len()]);
    for end in ends {
        let seen = &buf[..end];
        match parser.parse(seen, limits, &mut args) {
            Ok(None) => {}
            Ok(Some(n)) => {
                assert!(!parser.in_progress());
                let got = args.iter(seen).map(<[u8]>::to_vec).collect();
                return (Ok(Some((got, n))), parser.examined);
            }
            Err(e) => {
                assert!(args.is_empty());
                return (Err(e), parser.examined);
            }
        }
    }
    (Ok(None), parser.examined)
}

fn byte_by_byte(buf: &[u8], limits: &Limits) -> (Parsed, usize) {
    let cuts: Vec<usize> = (0..buf.len()).collect();
    in_pieces(buf, &cuts, limits)
}

#[test]
fn a_large_command_byte_by_byte_is_parsed_in_linear_work() {
    // 100,000 arguments of 1 to 3 bytes: about 800 KB, delivered one byte per read.
    let items: Vec<Vec<u8>> = (0..100_000u32)
        .map(|i| format!("{i:03}").into_bytes()[..1 + (i % 3) as usize].to_vec())
        .collect();
    let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
    let buf = multibulk(&refs);
    let (got, examined) = byte_by_byte(&buf, &Limits::default());
    assert_eq!(got, whole(&buf, &Limits::default()));
    let (args, n) = got.unwrap().unwrap();
    assert_eq!(n, buf.len());
    assert_eq!(args, items);
    // Every byte is looked at a bounded number of times: at most the length line it belongs
    // to is read again on the next call. Starting over at every call would examine about
    // n²/14 ≈ 4.5·10¹⁰ bytes here.
    assert!(
        examined <= 4 * buf.len(),
        "{examined} bytes examined for a {}-byte command",
        buf.len()
    );
}

#[test]
fn a_long_inline_line_byte_by_byte_is_scanned_once() {
    let mut line = Vec::new();
    for i in 0..6_000 {
        line.extend_from_slice(format!("arg{i} ").as_bytes());
    }
    line.extend_from_slice(b"\r\n");
    assert!(line.len() < Limits::default().max_inline_len);
    let (got, examined) = byte_by_byte(&line, &Limits::default());
    assert_eq!(got, whole(&line, &Limits::default()));
    assert_eq!(got.unwrap().unwrap().0.len(), 6_000);
    assert!(examined <= 3 * line.len(), "{examined} for {}", line.len());
}

#[test]
fn pipelined_commands_in_pieces() {
    let mut buf = multibulk(&[b"SET", b"key", b"value"]);
    buf.extend_from_slice(b"GET key\r\n");
    buf.extend_from_slice(&multibulk(&[b"PING"]));
    let mut parser = CommandParser::new();
    let mut args = Args::new();
    let mut start = 0;
    let mut seen = Vec::new();
    // Reads of 5 bytes; a consumed command is dropped from the front, as a server does.
    for end in (5..buf.len()).step_by(5).chain([buf.len()]) {
        while let Some(n) = parser
            .parse(&buf[start..end], &Limits::default(), &mut args)
            .unwrap()
        {
            let cmd: Vec<Vec<u8>> = args.iter(&buf[start..end]).map(<[u8]>::to_vec).collect();
            seen.push(cmd);
            start += n;
        }
    }
    assert_eq!(start, buf.len());
    let expected: Vec<Vec<Vec<u8>>> = vec![
        vec![b"SET".to_vec(), b"key".to_vec(), b"value".to_vec()],
        vec![b"GET".to_vec(), b"key".to_vec()],
        vec![b"PING".to_vec()],
    ];
    assert_eq!(seen, expected);
}

#[test]
fn reset_forgets_a_partial_command() {
    let mut parser = CommandParser::new();
    let mut args = Args::new();
    let limits = Limits::default();
    assert_eq!(
        parser.parse(b"*2\r\n$3\r\nGET\r\n", &limits, &mut args),
        Ok(None)
    );
    assert!(parser.in_progress());
    assert_eq!(args.len(), 1);
    parser.reset();
    assert!(!parser.in_progress());
    let buf = b"PING\r\n";
    assert_eq!(parser.parse(buf, &limits, &mut args), Ok(Some(6)));
    assert_eq!(args.iter(buf).collect::<Vec<_>>(), vec![b"PING" as &[u8]]);
}

fn limit(max_request_len: usize) -> Limits {
    Limits {
        max_request_len,
        ..Limits::DEFAULT
    }
}

fn request_too_large(max: usize) -> Parsed {
    Err(ParseError::TooLarge(format!(
        "command larger than the {max}-byte request limit"
    )))
}

#[test]
fn a_command_over_the_request_limit_is_refused_when_declared() {
    let cmd = multibulk(&[b"SET", b"k", &[b'v'; 20]]);
    assert_eq!(cmd.len(), 47);
    assert!(whole(&cmd, &limit(47)).unwrap().is_some());
    // Refused as soon as the third length line is complete, before any of its data.
    let header_end = cmd.len() - 22;
    assert_eq!(&cmd[header_end - 5..header_end], b"$20\r\n");
    assert_eq!(whole(&cmd[..header_end], &limit(46)), request_too_large(46));
    assert_eq!(whole(&cmd[..header_end - 1], &limit(46)), Ok(None));
    // A count that cannot fit: every bulk string takes at least 6 bytes.
    assert_eq!(whole(b"*8\r\n", &limit(51)), request_too_large(51));
    assert_eq!(whole(b"*8\r\n", &limit(52)), Ok(None));
    // The bulk strings still to come count too.
    assert_eq!(whole(b"*3\r\n$10\r\n", &limit(32)), request_too_large(32));
    assert_eq!(whole(b"*3\r\n$10\r\n", &limit(33)), Ok(None));
    // The texts read like Redis's protocol errors.
    assert_eq!(
        request_too_large(7).unwrap_err().to_string(),
        "Protocol error: command larger than the 7-byte request limit"
    );
}

#[test]
fn a_two_gib_bulk_string_is_refused_by_length_alone() {
    let unlimited_bulk = Limits {
        max_bulk_len: usize::MAX,
        ..Limits::DEFAULT
    };
    let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2147483648\r\n";
    assert_eq!(
        whole(buf, &unlimited_bulk),
        request_too_large(Limits::DEFAULT.max_request_len)
    );
    assert_eq!(
        whole(buf, &Limits::DEFAULT),
        Err(ParseError::TooLarge("invalid bulk length".into()))
    );
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
        Just(b" ".to_vec()),
        Just(b"-".to_vec()),
        (0u32..30).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..4),
    ];
    proptest::collection::vec(token, 0..40).prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn pieces_give_what_the_whole_buffer_gives(
        buf in resp_like_bytes(),
        mut cuts in proptest::collection::vec(0usize..200, 0..12),
    ) {
        cuts.sort_unstable();
        let tight = Limits { max_bulk_len: 8, max_args: 3, max_inline_len: 10, max_request_len: 40 };
        for limits in [Limits::default(), tight] {
            let (got, _) = in_pieces(&buf, &cuts, &limits);
            prop_assert_eq!(&got, &whole(&buf, &limits));
            let (got, _) = byte_by_byte(&buf, &limits);
            prop_assert_eq!(got, whole(&buf, &limits));
        }
    }

    #[test]
    fn multibulk_in_pieces_round_trips(
        items in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..30), 0..10),
        mut cuts in proptest::collection::vec(0usize..400, 0..20),
    ) {
        cuts.sort_unstable();
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let buf = multibulk(&refs);
        let (got, examined) = in_pieces(&buf, &cuts, &Limits::default());
        prop_assert_eq!(got, Ok(Some((items.clone(), buf.len()))));
        prop_assert!(examined <= 4 * buf.len() + 24 * cuts.len());
    }
}
