//! Functions and DAGs, stored in the KVS itself so that a restarted scheduler keeps them
//! and several schedulers share them.
//!
//! # Keys
//! - `lkv.faas/fn/<name>`: an LWW value, a [`pb::StoredFunction`] (format version 1,
//!   the name, the cloudpickle bytes).
//! - `lkv.faas/dag/<name>`: an LWW value, a [`pb::Dag`].
//!
//! Re-registering a name replaces it (last writer wins). Each scheduler caches what it
//! read for [`CACHE_TTL`], so a registration through another scheduler is seen within it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::time::Instant;

use crate::error::FaasError;
use crate::pb;

/// Prefix of function keys.
pub const FUNCTION_PREFIX: &str = "lkv.faas/fn/";
/// Prefix of DAG keys.
pub const DAG_PREFIX: &str = "lkv.faas/dag/";
/// How long a scheduler trusts what it read from the registry.
pub const CACHE_TTL: Duration = Duration::from_secs(2);
/// Format version of [`pb::StoredFunction`] records written now.
pub const FUNCTION_FORMAT: u32 = 1;

/// The key of function `name`.
pub fn function_key(name: &str) -> String {
    format!("{FUNCTION_PREFIX}{name}")
}

/// The key of DAG `name`.
pub fn dag_key(name: &str) -> String {
    format!("{DAG_PREFIX}{name}")
}

/// A function's stored bytes.
pub fn encode_function(name: &str, code: &[u8]) -> Vec<u8> {
    pb::StoredFunction {
        version: FUNCTION_FORMAT,
        name: name.to_string(),
        code: Bytes::copy_from_slice(code),
    }
    .encode_to_vec()
}

/// A function's code from its stored bytes.
///
/// # Errors
/// Bytes that do not decode, or a format version this build does not know.
pub fn decode_function(bytes: &[u8]) -> Result<pb::StoredFunction, String> {
    let f = pb::StoredFunction::decode(bytes).map_err(|e| e.to_string())?;
    if f.version != FUNCTION_FORMAT {
        return Err(format!("unknown function record version {}", f.version));
    }
    Ok(f)
}

/// A DAG's stored bytes.
pub fn encode_dag(dag: &pb::Dag) -> Vec<u8> {
    dag.encode_to_vec()
}

/// A DAG from its stored bytes.
///
/// # Errors
/// Bytes that do not decode.
pub fn decode_dag(bytes: &[u8]) -> Result<pb::Dag, String> {
    pb::Dag::decode(bytes).map_err(|e| e.to_string())
}

/// Checks a function or DAG name: non-empty, at most 256 bytes, no control characters.
///
/// # Errors
/// Why the name is refused.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
        return Err(format!(
            "invalid name {name:?}: 1 to 256 bytes, no control characters"
        ));
    }
    Ok(())
}

/// The registry as a scheduler sees it: the store, and what it read recently.
pub struct Registry {
    store: client::Client,
    functions: Mutex<HashMap<String, (Bytes, Instant)>>,
    dags: Mutex<HashMap<String, (pb::Dag, Instant)>>,
}

fn bad(message: impl Into<String>) -> FaasError {
    FaasError::remote(pb::ErrorCode::BadRequest, message)
}

impl Registry {
    /// A registry in `store`.
    pub fn new(store: client::Client) -> Registry {
        Registry {
            store,
            functions: Mutex::new(HashMap::new()),
            dags: Mutex::new(HashMap::new()),
        }
    }

    /// Stores function `name`.
    ///
    /// # Errors
    /// A bad name or empty code; the store's errors.
    pub async fn register_function(&self, name: &str, code: Bytes) -> Result<(), FaasError> {
        check_name(name).map_err(bad)?;
        if code.is_empty() {
            return Err(bad("a function needs code (cloudpickle bytes)"));
        }
        self.store
            .assign(function_key(name), encode_function(name, &code))
            .await?;
        if let Ok(mut f) = self.functions.lock() {
            f.insert(name.to_string(), (code, Instant::now()));
        }
        Ok(())
    }

    /// The code of function `name`.
    ///
    /// # Errors
    /// NOT_FOUND if it is not registered; the store's errors.
    pub async fn function(&self, name: &str) -> Result<Bytes, FaasError> {
        if let Ok(f) = self.functions.lock() {
            if let Some((code, at)) = f.get(name) {
                if at.elapsed() < CACHE_TTL {
                    return Ok(code.clone());
                }
            }
        }
        let Some(stored) = self.store.get_lww(function_key(name)).await? else {
            return Err(FaasError::remote(
                pb::ErrorCode::NotFound,
                format!("no function {name:?} is registered"),
            ));
        };
        let f = decode_function(&stored).map_err(|e| {
            FaasError::remote(
                pb::ErrorCode::Unavailable,
                format!("function {name:?}: {e}"),
            )
        })?;
        if let Ok(mut cache) = self.functions.lock() {
            cache.insert(name.to_string(), (f.code.clone(), Instant::now()));
        }
        Ok(f.code)
    }

    /// Validates and stores `dag`: every function must be registered.
    ///
    /// # Errors
    /// BAD_REQUEST for an invalid DAG, NOT_FOUND for an unregistered function.
    pub async fn register_dag(&self, dag: pb::Dag) -> Result<(), FaasError> {
        check_name(&dag.name).map_err(bad)?;
        crate::dag::validate(&dag).map_err(|e| bad(format!("DAG {:?}: {e}", dag.name)))?;
        for f in &dag.functions {
            self.function(f).await?;
        }
        self.store
            .assign(dag_key(&dag.name), encode_dag(&dag))
            .await?;
        if let Ok(mut d) = self.dags.lock() {
            d.insert(dag.name.clone(), (dag, Instant::now()));
        }
        Ok(())
    }

    /// DAG `name`.
    ///
    /// # Errors
    /// NOT_FOUND if it is not registered; the store's errors.
    pub async fn dag(&self, name: &str) -> Result<pb::Dag, FaasError> {
        if let Ok(d) = self.dags.lock() {
            if let Some((dag, at)) = d.get(name) {
                if at.elapsed() < CACHE_TTL {
                    return Ok(dag.clone());
                }
            }
        }
        let Some(stored) = self.store.get_lww(dag_key(name)).await? else {
            return Err(FaasError::remote(
                pb::ErrorCode::NotFound,
                format!("no DAG {name:?} is registered"),
            ));
        };
        let dag = decode_dag(&stored).map_err(|e| {
            FaasError::remote(pb::ErrorCode::Unavailable, format!("DAG {name:?}: {e}"))
        })?;
        if let Ok(mut cache) = self.dags.lock() {
            cache.insert(name.to_string(), (dag.clone(), Instant::now()));
        }
        Ok(dag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_documented_prefixes() {
        assert_eq!(function_key("incr"), "lkv.faas/fn/incr");
        assert_eq!(dag_key("pipe"), "lkv.faas/dag/pipe");
    }

    #[test]
    fn functions_round_trip_and_unknown_versions_are_refused() {
        let bytes = encode_function("incr", b"\x80\x05code");
        let f = decode_function(&bytes).unwrap();
        assert_eq!(
            (f.name.as_str(), &f.code[..]),
            ("incr", &b"\x80\x05code"[..])
        );
        let newer = pb::StoredFunction { version: 2, ..f }.encode_to_vec();
        assert!(decode_function(&newer).unwrap_err().contains("version 2"));
        assert!(decode_function(b"\xff\xff").is_err());
    }

    #[test]
    fn dags_round_trip() {
        let dag = pb::Dag {
            name: "pipe".into(),
            functions: vec!["incr".into(), "square".into()],
            edges: vec![pb::Edge {
                from: "incr".into(),
                to: "square".into(),
            }],
        };
        assert_eq!(decode_dag(&encode_dag(&dag)).unwrap(), dag);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("incr").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a\nb").is_err());
        assert!(check_name(&"x".repeat(257)).is_err());
    }
}
