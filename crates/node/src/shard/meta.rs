//! Reads of a key's causal metadata without its payload (`GetMany.metadata_only`).

use lattice::{Blob, Lww, Value};
use store::RecordRef;

/// The metadata of a live record: causal versions with empty payloads, an LWW register's
/// timestamp with an empty value, any other type in full (it has no payload apart from its
/// state). `None` for a tombstone.
pub(super) fn metadata_of(r: &RecordRef<'_>) -> Option<Value> {
    match r {
        RecordRef::Lww { ts, .. } => Some(Value::Lww(Lww::new(*ts, Blob::default()))),
        RecordRef::Full(rec) => rec.value.as_ref().map(|v| match v {
            Value::MultiKeyCausal(m) => Value::MultiKeyCausal(m.metadata()),
            Value::SingleKeyCausal(s) => Value::SingleKeyCausal(s.metadata()),
            other => other.clone(),
        }),
    }
}
