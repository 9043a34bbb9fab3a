//! One function of a DAG spread over hosts (protocol OPT), on the host it was placed on:
//! its reads validated by the host's cache ([`OptPlane::reads`]), the function run on an
//! executor, and at the sink the writes of the whole DAG committed
//! ([`OptPlane::commit`]). A data plane without a cache (`--data-plane direct`, the
//! baseline) reads the function's keys straight from the store and commits as in CT.
//!
//! The outcome is a [`pb::FnDone`]: the result and the metadata for the downstream edges,
//! an abort (the scheduler retries the DAG), or an error (the call fails). The attempt's
//! pins stay until the scheduler releases the attempt: downstream caches fetch from them.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cache::opt::Upstream;
use cache::{CacheId, Key, KeySet};

use crate::data::{DataPlane, OptStep, StepError};
use crate::error::{pb_error, FaasError};
use crate::meta::{edge_from_pb, edge_to_pb};
use crate::pb;
use crate::reftable::{refs_from_table, refs_to_table};

/// Pins of an attempt outlive the call's timeout by this much (a backstop: the scheduler
/// releases them when the attempt ends).
const PIN_SLACK: Duration = Duration::from_secs(60);

/// How a function's run ended, short of a result.
enum Failure {
    Abort(String),
    Error(pb::Error),
}

impl From<FaasError> for Failure {
    fn from(e: FaasError) -> Self {
        Failure::Error(e.to_pb())
    }
}

fn failed(code: pb::ErrorCode, message: impl Into<String>) -> Failure {
    Failure::Error(pb_error(code, message))
}

/// Runs `step`'s function with `data`'s reads; `run` runs a task on an executor (the host
/// assigns its id).
pub(crate) async fn run_fn<F, Fut>(data: &Arc<dyn DataPlane>, step: pb::RunFn, run: F) -> pb::FnDone
where
    F: FnOnce(pb::Task) -> Fut,
    Fut: Future<Output = Result<pb::TaskDone, FaasError>>,
{
    let mut done = pb::FnDone {
        run_id: step.run_id,
        attempt: step.attempt,
        function: step.function.clone(),
        ..Default::default()
    };
    let limit = match step.timeout_ms {
        0 => Duration::MAX,
        ms => Duration::from_millis(u64::from(ms)),
    };
    let outcome = tokio::time::timeout(limit, run_inner(data, step, run))
        .await
        .unwrap_or_else(|_| Err(failed(pb::ErrorCode::Timeout, "the call timed out")));
    done.result = Some(match outcome {
        Ok((value, meta, writes)) => {
            done.meta = Some(meta);
            done.writes = writes;
            pb::fn_done::Result::Value(value)
        }
        Err(Failure::Abort(why)) => pb::fn_done::Result::Abort(why),
        Err(Failure::Error(e)) => pb::fn_done::Result::Error(e),
    });
    done
}

/// When pins of an attempt of a call with this timeout may expire.
fn deadline_ms(timeout_ms: u32) -> u64 {
    let pin_for = Duration::from_millis(u64::from(timeout_ms)) + PIN_SLACK;
    now_ms().saturating_add(u64::try_from(pin_for.as_millis()).unwrap_or(u64::MAX))
}

/// CON's preparation of one function at its host: `S_i`, pinned for the attempt (a host
/// without a causal cache answers an empty snapshot: it reads from the store anyway).
pub(crate) async fn con_prepare(data: &Arc<dyn DataPlane>, msg: pb::ConPrepare) -> pb::ConSnapshot {
    let mut out = pb::ConSnapshot {
        run_id: msg.run_id,
        attempt: msg.attempt,
        function: msg.function.clone(),
        ..Default::default()
    };
    let Some(o) = data.opt() else {
        return out;
    };
    let step = OptStep {
        attempt: msg.attempt,
        keys: msg.keys,
        rdag: msg.rdag.iter().map(|k| Key::from(&k[..])).collect(),
        upstream: Vec::new(),
        peers: BTreeMap::new(),
        deadline_ms: deadline_ms(msg.timeout_ms),
        con: None,
    };
    match o.con_snapshot(&step).await {
        Ok(s) => out.s = Some(refs_to_table(&s)),
        Err(e) => out.error = e.to_string(),
    }
    out
}

/// HB's query of one function at its host: the cache's metadata view of the function's
/// keys (empty without a causal cache: every key simulated as not cached).
pub(crate) fn hb_query(data: &Arc<dyn DataPlane>, q: pb::HbQuery) -> pb::HbView {
    let mut out = pb::HbView {
        run_id: q.run_id,
        attempt: q.attempt,
        function: q.function,
        ..Default::default()
    };
    if let Some(o) = data.opt() {
        let keys: KeySet = q.keys.iter().map(|k| Key::from(&k[..])).collect();
        let rdag: KeySet = q.rdag.iter().map(|k| Key::from(&k[..])).collect();
        let view = o.hb_view(&keys, &rdag);
        out.cache_id = view.cache.0;
        (out.table, out.keys) = {
            let (table, keys) = crate::meta::view_to_pb(&view);
            (Some(table), keys)
        };
    }
    out
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

async fn run_inner<F, Fut>(
    data: &Arc<dyn DataPlane>,
    step: pb::RunFn,
    run: F,
) -> Result<(Bytes, pb::EdgeMeta, Vec<pb::Write>), Failure>
where
    F: FnOnce(pb::Task) -> Fut,
    Fut: Future<Output = Result<pb::TaskDone, FaasError>>,
{
    let own = step.args.clone().unwrap_or_default().args;
    let mut keys: Vec<Bytes> = Vec::new();
    let mut seen = HashSet::new();
    for a in &own {
        if let Some(pb::arg::Kind::KeyRef(k)) = &a.kind {
            if seen.insert(k.clone()) {
                keys.push(k.clone());
            }
        }
    }
    let upstream: Vec<Upstream> = step
        .upstream_meta
        .iter()
        .map(edge_from_pb)
        .collect::<Result<_, _>>()
        .map_err(|e| failed(pb::ErrorCode::BadRequest, e.to_string()))?;
    let con = if step.con {
        Some(cache::con::Part {
            reads: refs_from_table(&step.con_reads.clone().unwrap_or_default())
                .map_err(|e| failed(pb::ErrorCode::BadRequest, e.to_string()))?,
            remote: refs_from_table(&step.con_remote.clone().unwrap_or_default())
                .map_err(|e| failed(pb::ErrorCode::BadRequest, e.to_string()))?,
        })
    } else {
        None
    };
    let opt_step = OptStep {
        attempt: step.attempt,
        keys: keys.clone(),
        rdag: step
            .rdag
            .iter()
            .map(|k| Key::from(&k[..]))
            .collect::<KeySet>(),
        upstream,
        peers: step
            .peers
            .iter()
            .map(|p| (CacheId(p.cache_id), p.addr.clone()))
            .collect(),
        deadline_ms: deadline_ms(step.timeout_ms),
        con,
    };
    let step_failure = |what: &str, e: StepError| match e {
        StepError::Abort(why) => Failure::Abort(why),
        StepError::Failed(why) => failed(pb::ErrorCode::Unavailable, format!("{what}: {why}")),
    };
    let (reads, down) = if keys.is_empty() && data.opt().is_none() {
        (Vec::new(), Upstream::source())
    } else if let Some(o) = data.opt() {
        let r = o
            .reads(&opt_step)
            .await
            .map_err(|e| step_failure("reading key references", e))?;
        (r.reads, r.down)
    } else {
        let r = data.snapshot(step.attempt, keys).await.map_err(|e| {
            failed(
                pb::ErrorCode::Unavailable,
                format!("reading key references: {e}"),
            )
        })?;
        (r, Upstream::source())
    };
    let reads: BTreeMap<Bytes, pb::KeyRead> =
        reads.into_iter().map(|r| (r.key.clone(), r)).collect();
    let mut args: Vec<pb::TaskArg> = step
        .upstream
        .iter()
        .map(|u| pb::TaskArg {
            kind: Some(pb::task_arg::Kind::Upstream(u.clone())),
        })
        .collect();
    for a in &own {
        let kind = match &a.kind {
            Some(pb::arg::Kind::Value(v)) => pb::task_arg::Kind::Value(v.clone()),
            Some(pb::arg::Kind::KeyRef(k)) => {
                pb::task_arg::Kind::Key(reads.get(k).cloned().unwrap_or_else(|| pb::KeyRead {
                    key: k.clone(),
                    ..Default::default()
                }))
            }
            None => return Err(failed(pb::ErrorCode::BadRequest, "an empty argument")),
        };
        args.push(pb::TaskArg { kind: Some(kind) });
    }
    let task = pb::Task {
        id: 0,
        function: step.function.clone(),
        code: step.code.clone(),
        args,
    };
    let out = run(task).await?;
    let value = match out.result {
        Some(pb::task_done::Result::Value(v)) => v,
        Some(pb::task_done::Result::Traceback(tb)) => {
            let last = tb.trim_end().lines().last().unwrap_or("").to_string();
            return Err(Failure::Error(pb::Error {
                code: pb::ErrorCode::FunctionRaised as i32,
                message: format!("function {:?} raised {last}", step.function),
                traceback: tb,
                function: step.function.clone(),
                exception: out.exception,
            }));
        }
        None => {
            return Err(failed(
                pb::ErrorCode::Unavailable,
                format!("function {:?}: the executor sent no result", step.function),
            ))
        }
    };
    if !step.sink {
        return Ok((value, edge_to_pb(&down), out.writes));
    }
    let mut writes = step.writes;
    writes.extend(out.writes);
    if !writes.is_empty() {
        let unavailable = |e: String| {
            failed(
                pb::ErrorCode::Unavailable,
                format!("writing at the sink: {e}"),
            )
        };
        let marker = step.commit_marker.as_str();
        let done = !marker.is_empty() && data.committed(marker).await.map_err(unavailable)?;
        if !done {
            match data.opt() {
                Some(o) => o
                    .commit(&opt_step, down.r.clone(), writes)
                    .await
                    .map_err(|e| step_failure("writing at the sink", e))?,
                None => data
                    .commit(step.attempt, writes)
                    .await
                    .map_err(unavailable)?,
            }
            if !marker.is_empty() {
                data.mark_committed(marker).await.map_err(unavailable)?;
            }
        }
    }
    // The sink has no downstream edge: its metadata would go nowhere.
    Ok((value, pb::EdgeMeta::default(), Vec::new()))
}
