//! SIGINT, SIGTERM and SIGHUP for the commands that run in the foreground (`local`,
//! `server`, `routing`, `faas`): caught from the process's first moments, before anything
//! starts, so a signal that comes while a node is still starting (replaying its log,
//! binding its ports) stops it cleanly once it has started instead of killing it halfway.
//!
//! [`install`] registers the handlers on a thread of their own, which counts the signals in
//! two watch channels (stop requests: SIGINT and SIGTERM; reloads: SIGHUP), then unblocks the
//! three signals on the calling thread: a supervisor that blocked them across `exec` (to
//! close the window before `main` runs) has its pending signal handled at that moment.
//! Every wait starts from the counts, so none can miss a signal that came before it began.

use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use tokio::sync::watch;

/// The counts of signals received, kept by the signal thread.
struct Counts {
    /// SIGINT and SIGTERM.
    stops: watch::Sender<u64>,
    /// SIGHUP.
    hangups: watch::Sender<u64>,
}

static COUNTS: OnceLock<std::result::Result<Counts, String>> = OnceLock::new();

/// Catches SIGINT, SIGTERM and SIGHUP from now on (idempotent). Call it first thing in a
/// command that runs in the foreground.
pub(crate) fn install() -> Result<()> {
    counts().map(|_| ())
}

fn counts() -> Result<&'static Counts> {
    COUNTS
        .get_or_init(|| start().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow!("handling signals: {e}"))
}

fn start() -> Result<Counts> {
    let (stops, _) = watch::channel(0u64);
    let (hangups, _) = watch::channel(0u64);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
    let (stop_tx, hup_tx) = (stops.clone(), hangups.clone());
    std::thread::Builder::new()
        .name("lkv-signals".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let registered = (|| {
                    Ok::<_, std::io::Error>((
                        signal(SignalKind::terminate())?,
                        signal(SignalKind::interrupt())?,
                        signal(SignalKind::hangup())?,
                    ))
                })();
                let (mut term, mut int, mut hup) = match registered {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                loop {
                    tokio::select! {
                        _ = term.recv() => stop_tx.send_modify(|n| *n += 1),
                        _ = int.recv() => stop_tx.send_modify(|n| *n += 1),
                        _ = hup.recv() => hup_tx.send_modify(|n| *n += 1),
                    }
                }
            });
        })?;
    ready_rx
        .recv()
        .map_err(|_| anyhow!("the signal thread ended before registering"))??;
    unblock();
    Ok(Counts { stops, hangups })
}

/// Unblocks SIGINT, SIGTERM and SIGHUP on this thread (now that they are handled): a signal
/// left pending by a parent that blocked them is delivered here and now.
fn unblock() {
    // SAFETY: the set is initialised by sigemptyset before use; pthread_sigmask only
    // changes this thread's mask and is given valid pointers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// SIGINT and SIGTERM received so far: a receiver whose value is their count.
pub(crate) fn stops() -> Result<watch::Receiver<u64>> {
    Ok(counts()?.stops.subscribe())
}

/// SIGHUP received so far: a receiver whose value is their count, every one already seen.
pub(crate) fn hangups() -> Result<watch::Receiver<u64>> {
    Ok(counts()?.hangups.subscribe())
}

/// Whether a SIGINT or SIGTERM has come (false if signals are not handled).
pub(crate) fn stop_requested() -> bool {
    counts().is_ok_and(|c| *c.stops.borrow() > 0)
}

/// Waits until more than `seen` SIGINTs and SIGTERMs have come in all.
pub(crate) async fn stop_signals(seen: u64) {
    match stops() {
        Ok(mut rx) => {
            let _ = rx.wait_for(|n| *n > seen).await;
        }
        Err(_) => std::future::pending().await,
    }
}
