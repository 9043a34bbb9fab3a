//! A host's executors: the Python worker processes it starts and keeps running, their
//! connections, and the pool that hands each task to a free one (`host` owns one
//! [`Executors`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::conn;
use crate::error::{pb_error, FaasError};
use crate::exlink::{Link, Regions};
use crate::pb;
use crate::shm::{self, Region};

/// A host's executors.
pub(crate) struct Executors {
    pool: Pool,
    /// Shared regions of started executors, until their hello.
    regions: Regions,
    /// The Python interpreter that runs them.
    python: String,
    /// Bytes of each executor's shared region (0: none).
    shm_bytes: usize,
    /// Most executor deaths a task may see before it fails.
    task_attempts: u32,
}

impl Executors {
    /// Executors run by `python`, each with a region of `shm_bytes`; a task fails after
    /// `task_attempts` of its executors died.
    pub(crate) fn new(python: String, shm_bytes: usize, task_attempts: u32) -> Executors {
        Executors {
            pool: Pool::default(),
            regions: Regions::default(),
            python,
            shm_bytes,
            task_attempts,
        }
    }

    /// Executors running a task now.
    pub(crate) fn busy(&self) -> u32 {
        self.pool.busy.load(Ordering::Relaxed)
    }
}

/// Resolves when `shutdown` becomes true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// A job for one executor: a task and where its outcome goes (dropped if the executor
/// dies).
type Job = (pb::Task, oneshot::Sender<pb::TaskDone>);

/// A connected executor, as the pool holds it.
#[derive(Clone)]
struct Executor {
    id: u32,
    jobs: mpsc::Sender<Job>,
}

/// Free executors. An executor's connection task puts it back after each job, so a run
/// that is abandoned never leaks one.
#[derive(Default)]
struct Pool {
    free: Mutex<VecDeque<Executor>>,
    available: Notify,
    busy: AtomicU32,
    connected: AtomicU32,
}

impl Pool {
    fn release(&self, e: Executor) {
        if let Ok(mut f) = self.free.lock() {
            f.push_back(e);
        }
        self.available.notify_one();
    }

    async fn acquire(&self) -> Executor {
        loop {
            let notified = self.available.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next = self.free.lock().ok().and_then(|mut f| {
                while let Some(e) = f.pop_front() {
                    if !e.jobs.is_closed() {
                        return Some(e);
                    }
                }
                None
            });
            if let Some(e) = next {
                return e;
            }
            notified.await;
        }
    }
}

/// A new shared region for an executor process (`None`: regions off, or none could be
/// made; the executor then uses the socket only).
fn new_region(bytes: usize) -> Option<Arc<Region>> {
    if bytes == 0 {
        return None;
    }
    match Region::create(bytes) {
        Ok(r) => Some(Arc::new(r)),
        Err(e) => {
            tracing::warn!("no shared region for an executor ({e}): large tasks take the socket");
            None
        }
    }
}

/// Keeps executor `id` running: starts it, and starts it again when it exits.
pub(crate) async fn supervise(
    ex: Arc<Executors>,
    addr: SocketAddr,
    id: u32,
    mut shutdown: watch::Receiver<bool>,
) {
    let python = ex.python.clone();
    let mut backoff = Duration::from_millis(100);
    loop {
        if *shutdown.borrow() {
            return;
        }
        let region = new_region(ex.shm_bytes);
        let region_fd = region.as_ref().map(|r| r.fd().as_raw_fd());
        let mut command = tokio::process::Command::new(&python);
        if let Some(fd) = region_fd {
            command.env(shm::FD_ENV, fd.to_string());
        }
        command
            .args(["-m", "latticekv.faas.executor", "--host"])
            .arg(addr.to_string())
            .args(["--id", &id.to_string()])
            .stdin(std::process::Stdio::null())
            // A function's prints go to the host's stderr: its stdout may be a pipe that
            // nobody reads any more (`latticekv local` prints its addresses there).
            .stdout(std::io::stderr())
            .kill_on_drop(true);
        #[cfg(target_os = "linux")]
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
        // which is async-signal-safe, and reads errno.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // This child (only) inherits its region: the host's descriptor is
                // close-on-exec, so every other process it starts goes without.
                if let Some(fd) = region_fd {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let started = tokio::time::Instant::now();
        match command.spawn() {
            Ok(mut child) => {
                let pid = child.id().unwrap_or(0);
                if let Some(r) = &region {
                    ex.regions.offer(id, pid, r.clone());
                }
                tokio::select! {
                    status = child.wait() => {
                        if started.elapsed() < Duration::from_secs(2) {
                            tracing::warn!(
                                executor = id, ?status, %python,
                                "executor exited at once; restarting it (does {python} have \
                                 the latticekv package and cloudpickle?)"
                            );
                        } else {
                            tracing::warn!(executor = id, ?status, "executor exited; restarting it");
                        }
                    }
                    () = stopped(&mut shutdown) => {
                        let _ = child.kill().await;
                        return;
                    }
                }
                ex.regions.withdraw(id, pid);
            }
            Err(e) => tracing::error!(executor = id, %python, "cannot start executor: {e}"),
        }
        if started.elapsed() > Duration::from_secs(10) {
            backoff = Duration::from_millis(100);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            () = stopped(&mut shutdown) => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Accepts executors' connections (each served by [`serve`]).
pub(crate) async fn accept(listener: TcpListener, ex: Arc<Executors>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve(stream, ex.clone()));
    }
}

/// One executor's connection: hello, then one job at a time. Ends (dropping the job in
/// hand, which its run sees as the executor's death) when the connection breaks.
async fn serve(stream: TcpStream, ex: Arc<Executors>) {
    let (mut r, w) = stream.into_split();
    let hello = match conn::read::<pb::FromExecutor, _>(&mut r).await {
        Ok(Some(pb::FromExecutor {
            msg: Some(pb::from_executor::Msg::Hello(h)),
        })) => h,
        _ => return,
    };
    let mut link = Link::new(r, w, ex.regions.claim(&hello));
    let (tx, mut rx) = mpsc::channel::<Job>(1);
    let me = Executor {
        id: hello.id,
        jobs: tx,
    };
    tracing::info!(
        executor = hello.id,
        pid = hello.pid,
        shared_region = link.shared(),
        "executor connected"
    );
    ex.pool.connected.fetch_add(1, Ordering::Relaxed);
    ex.pool.release(me.clone());
    loop {
        // While idle, watch the socket too: an executor that dies between jobs leaves the
        // pool at once, instead of failing (and costing an attempt of) the next task.
        let mut probe = [0u8; 1];
        let job = tokio::select! {
            job = rx.recv() => job,
            _ = link.reader().peek(&mut probe) => None, // closed, or bytes nobody asked for
        };
        let Some((task, reply)) = job else {
            break;
        };
        ex.pool.busy.fetch_add(1, Ordering::Relaxed);
        let id = task.id;
        let msg = pb::ToExecutor {
            msg: Some(pb::to_executor::Msg::Task(task)),
        };
        let outcome = match link.send(&msg).await {
            Ok(()) => loop {
                match link.recv().await {
                    Ok(Some(pb::FromExecutor {
                        msg: Some(pb::from_executor::Msg::Done(d)),
                    })) if d.id == id => break Some(d),
                    Ok(Some(_)) => continue,
                    _ => break None,
                }
            },
            Err(_) => None,
        };
        ex.pool.busy.fetch_sub(1, Ordering::Relaxed);
        match outcome {
            Some(done) => {
                let _ = reply.send(done);
                ex.pool.release(me.clone());
            }
            None => break,
        }
    }
    ex.pool.connected.fetch_sub(1, Ordering::Relaxed);
    tracing::warn!(executor = me.id, "executor connection closed");
}

impl Executors {
    /// Runs one function on a free executor; again on another if its executor dies.
    pub(crate) async fn run(&self, task: pb::Task) -> Result<pb::TaskDone, FaasError> {
        let mut deaths = 0;
        loop {
            let executor = self.pool.acquire().await;
            let (tx, rx) = oneshot::channel();
            if executor.jobs.send((task.clone(), tx)).await.is_err() {
                continue; // died while idle: not this task's attempt
            }
            match rx.await {
                Ok(done) => return Ok(done),
                Err(_) => {
                    deaths += 1;
                    tracing::warn!(
                        executor = executor.id,
                        function = %task.function,
                        "executor died running a function (attempt {deaths})"
                    );
                    if deaths >= self.task_attempts {
                        return Err(FaasError::from_pb(pb_error(
                            pb::ErrorCode::Unavailable,
                            format!(
                                "function {:?}: its executor died {deaths} times",
                                task.function
                            ),
                        )));
                    }
                }
            }
        }
    }
}
