//! Convergence: after quiescence every replica holds the same versions of every key, and holds
//! every key a committed write wrote.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{FinalState, WriteId};
use crate::index::{show, Index};
use crate::report::{Anomaly, Report, FINALS_SESSION};

/// [`Anomaly::Divergence`] and [`Anomaly::MissingKey`] over `index.history.finals`; nothing
/// when there are fewer than two replica maps.
pub(crate) fn check(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    let finals = &index.history.finals;
    if finals.len() < 2 {
        return report;
    }
    let at = index.finals_op();
    // Every key some committed write wrote.
    let written: BTreeSet<&[u8]> = index
        .writes
        .iter()
        .filter(|(w, _)| !index.is_aborted(**w))
        .map(|(_, i)| i.key)
        .collect();
    for (r, state) in finals.iter().enumerate() {
        for key in &written {
            if state.get(*key).is_none_or(Vec::is_empty) {
                let detail = format!(
                    "replica {r} lacks {}, which a committed write wrote",
                    show(key)
                );
                report.push(Anomaly::MissingKey, FINALS_SESSION, at, detail);
            }
        }
    }
    let keys: BTreeSet<&[u8]> = finals
        .iter()
        .flat_map(|f| f.keys().map(Vec::as_slice))
        .collect();
    for key in keys {
        let first = versions(&finals[0], key);
        for (r, state) in finals.iter().enumerate().skip(1) {
            let other = versions(state, key);
            if other != first {
                let detail = format!(
                    "{}: replica 0 holds {first:?}, replica {r} holds {other:?}",
                    show(key)
                );
                report.push(Anomaly::Divergence, FINALS_SESSION, at, detail);
            }
        }
    }
    report
}

/// The write ids `state` holds for `key` (empty when absent).
fn versions(state: &FinalState, key: &[u8]) -> BTreeSet<WriteId> {
    state
        .get(key)
        .map(|vs| vs.iter().map(|v| v.write).collect())
        .unwrap_or_default()
}

/// The single version each key of `state` holds, for the rules that ask which write won; keys
/// with no or several versions are left out.
pub(crate) fn winners(state: &FinalState) -> BTreeMap<&[u8], WriteId> {
    state
        .iter()
        .filter_map(|(k, vs)| match vs.as_slice() {
            [only] => Some((k.as_slice(), only.write)),
            _ => None,
        })
        .collect()
}
