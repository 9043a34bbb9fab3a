//! Lua scripts ([`Op::Script`]) on this worker: where the keys must be, and the runner.
//!
//! The shard runs a script as one op, so nothing else runs on the worker until it ends —
//! what makes a script atomic *on this replica*. Every key in `KEYS` must be served here
//! (else `CROSSSLOT`, nothing run), and so must every key a command of the script touches
//! ([`Shard::script_key`]). The commands themselves are planned by the RESP front end, which
//! installs the runner at start ([`install_script_runner`]): the shard cannot depend on the
//! front end (it sits below it).

use std::sync::{Arc, OnceLock};

use super::{Route, Shard};
use crate::error::NodeError;
use crate::op::OpResult;
use crate::script::Runs;

/// One script to run: what an [`Op::Script`](crate::op::Op::Script) carries.
#[derive(Debug)]
pub struct ScriptCall<'a> {
    /// The source.
    pub body: &'a [u8],
    /// `KEYS`.
    pub keys: Vec<&'a [u8]>,
    /// `ARGV`.
    pub args: Vec<&'a [u8]>,
    /// `EVAL_RO`: its commands may only read.
    pub read_only: bool,
    /// The reply is for a RESP3 connection.
    pub resp3: bool,
}

/// Runs a script on a worker whose keys were checked: its reply.
pub type ScriptRunner = fn(&mut Shard, ScriptCall<'_>) -> OpResult;

static RUNNER: OnceLock<ScriptRunner> = OnceLock::new();

/// Installs the script runner (once per process; later calls change nothing).
pub fn install_script_runner(runner: ScriptRunner) {
    let _ = RUNNER.set(runner);
}

impl Shard {
    /// [`Op::Script`](crate::op::Op::Script).
    pub(super) fn script(&mut self, call: ScriptCall<'_>) -> OpResult {
        for key in &call.keys {
            if self.route(key) != Route::Local {
                return OpResult::Error(NodeError::InvalidArgument(
                    "CROSSSLOT the keys of a script must be held by one worker; these are \
                     not, and the script did not run"
                        .into(),
                ));
            }
        }
        match RUNNER.get() {
            Some(run) => run(self, call),
            None => OpResult::Error(NodeError::InvalidArgument(
                "scripts cannot run on this node (no script runner)".into(),
            )),
        }
    }

    /// Registers this worker's scripts with the node's running scripts (`SCRIPT KILL`).
    pub fn set_script_runs(&mut self, runs: Arc<Runs>) {
        self.script_runs = Some(runs);
    }

    /// The node's running scripts, if registered.
    pub fn script_runs(&self) -> Option<&Arc<Runs>> {
        self.script_runs.as_ref()
    }

    /// Checks that a command of a script may touch `key` now: it is served by this worker
    /// and its record is here (read from the disk tier first if this is a disk-tier worker;
    /// an error to retry if a memory-tier worker evicted it — only the script's first key
    /// is fetched before it runs).
    pub fn script_key(&mut self, key: &[u8]) -> Result<(), NodeError> {
        if self.route(key) != Route::Local {
            return Err(NodeError::InvalidArgument(
                "Script attempted to access a non local key in a cluster node".into(),
            ));
        }
        self.fault_in(key)?;
        if self.must_fetch(&crate::op::Op::Get { key }) {
            return Err(NodeError::Unavailable(
                "a key the script touches is on the disk tier only: retry".into(),
            ));
        }
        Ok(())
    }
}
