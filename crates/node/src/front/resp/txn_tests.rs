//! The queue logic of `MULTI` / `EXEC` / `DISCARD` / `WATCH`, without a worker.

use bytes::BytesMut;
use wire::resp::{Args, CommandParser, Limits};

use super::*;

/// Parses one command from RESP text.
fn parse(text: &str) -> (BytesMut, Args) {
    let buf = BytesMut::from(text.as_bytes());
    let mut args = Args::default();
    let limits = Limits {
        max_bulk_len: 1 << 20,
        max_args: 1024,
        max_inline_len: 1 << 16,
        max_request_len: 1 << 24,
    };
    let n = CommandParser::new()
        .parse(&buf, &limits, &mut args)
        .unwrap()
        .unwrap();
    assert_eq!(n, buf.len(), "one whole command");
    (buf, args)
}

/// Queues the inline command `line` with the arity the server table gives it.
fn queue(t: &mut Txn, line: &str) -> Vec<u8> {
    let (buf, args) = parse(&format!("{line}\r\n"));
    let cmd = Cmd {
        buf: &buf,
        args: &args,
    };
    t.queue(&cmd, server::arity(&cmd.name_lower()))
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap()
}

#[test]
fn commands_queue_and_exec_returns_them_in_order() {
    let mut t = Txn::default();
    assert_eq!(text(t.begin()), "+OK\r\n");
    assert!(t.in_multi());
    assert_eq!(text(queue(&mut t, "SET a 1")), "+QUEUED\r\n");
    assert_eq!(text(queue(&mut t, "INCR a")), "+QUEUED\r\n");
    // A bad option is found when the command runs (as Redis): queued.
    assert_eq!(text(queue(&mut t, "SET a 1 BOGUS")), "+QUEUED\r\n");
    let tx = t.take().unwrap();
    assert!(!t.in_multi());
    assert!(tx.guards.is_empty());
    let names: Vec<String> = tx.commands.iter().map(|q| q.cmd().name_lower()).collect();
    assert_eq!(names, ["set", "incr", "set"]);
    assert_eq!(tx.commands[0].cmd().arg(2), b"1");
    assert_eq!(tx.commands[2].cmd().arg(3), b"BOGUS");
}

#[test]
fn queue_time_errors_abort_the_transaction() {
    let mut t = Txn::default();
    t.begin();
    assert!(text(queue(&mut t, "NOPE x")).starts_with("-ERR unknown command 'NOPE'"));
    assert_eq!(text(queue(&mut t, "SET a 1")), "+QUEUED\r\n");
    assert_eq!(
        text(queue(&mut t, "GET")),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        text(t.take().unwrap_err()),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // The next transaction starts clean.
    t.begin();
    queue(&mut t, "GET a");
    assert_eq!(t.take().unwrap().commands.len(), 1);
}

#[test]
fn nesting_discard_and_exec_without_multi() {
    let mut t = Txn::default();
    assert_eq!(text(t.take().unwrap_err()), "-ERR EXEC without MULTI\r\n");
    assert_eq!(text(t.discard()), "-ERR DISCARD without MULTI\r\n");
    t.begin();
    assert_eq!(text(t.begin()), "-ERR MULTI calls can not be nested\r\n");
    // Nesting does not abort (as Redis).
    queue(&mut t, "GET a");
    assert_eq!(text(t.discard()), "+OK\r\n");
    assert!(!t.in_multi());
    assert_eq!(text(t.take().unwrap_err()), "-ERR EXEC without MULTI\r\n");
}

#[test]
fn the_queue_is_bounded() {
    let mut t = Txn::default();
    t.begin();
    for _ in 0..MAX_QUEUED {
        assert_eq!(text(queue(&mut t, "GET a")), "+QUEUED\r\n");
    }
    assert!(text(queue(&mut t, "GET a")).starts_with("-ERR transaction too large"));
    assert!(text(t.take().unwrap_err()).starts_with("-EXECABORT"));
}

#[test]
fn watched_versions_become_guards_and_are_forgotten_after_exec() {
    let mut t = Txn::default();
    let store = t.watch(vec![b"x".to_vec(), b"y".to_vec()]);
    store(Some(vec![7, 9]));
    t.begin();
    queue(&mut t, "SET x 1");
    let tx = t.take().unwrap();
    assert_eq!(tx.guards, [(b"x".to_vec(), 7), (b"y".to_vec(), 9)]);
    // EXEC unwatches.
    t.begin();
    assert!(t.take().unwrap().guards.is_empty());
}

#[test]
fn a_pending_watch_makes_exec_fail_and_a_late_answer_is_ignored_after_unwatch() {
    let mut t = Txn::default();
    let _pending = t.watch(vec![b"x".to_vec()]);
    t.begin();
    assert!(text(t.take().unwrap_err()).contains("before WATCH was answered"));
    // Answered after UNWATCH: not stored.
    let late = t.watch(vec![b"x".to_vec()]);
    t.unwatch();
    late(Some(vec![3]));
    t.begin();
    assert!(t.take().unwrap().guards.is_empty());
    // A refused WATCH watches nothing.
    let failed = t.watch(vec![b"x".to_vec()]);
    failed(None);
    t.begin();
    assert!(t.take().unwrap().guards.is_empty());
}

#[test]
fn discard_unwatches() {
    let mut t = Txn::default();
    t.watch(vec![b"x".to_vec()])(Some(vec![1]));
    t.begin();
    t.discard();
    t.begin();
    assert!(t.take().unwrap().guards.is_empty());
}
