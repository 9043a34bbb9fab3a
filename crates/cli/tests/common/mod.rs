//! The test kit (`testkit`) bound to this crate's `latticekv` binary: [`NodeProc`] starts
//! `env!("CARGO_BIN_EXE_latticekv")`, which only the `cli` crate's tests can name; every
//! other helper is the kit's.

#![allow(dead_code, unused_imports)]

pub mod cluster;
pub mod http;

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};

pub use testkit::{closed_by_peer, eventually, serial, Native, Resp, Tmpfs, SIGINT, SIGTERM};

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_latticekv")
}

/// A running `latticekv` process of the binary under test: a [`testkit::NodeProc`]
/// (fields and methods through `Deref`) with starters that need no binary path.
pub struct NodeProc(pub testkit::NodeProc);

impl NodeProc {
    /// Starts `latticekv local` with `extra` flags on ephemeral ports, in a fresh data
    /// directory unless `extra` names one: [`testkit::NodeProc::start_bin`].
    pub fn start(extra: &[&str]) -> NodeProc {
        NodeProc(testkit::NodeProc::start_bin(bin(), extra))
    }

    /// Starts `latticekv server` named `id`, joining through `seed`:
    /// [`testkit::NodeProc::server_bin`].
    pub fn server(id: &str, seed: Option<SocketAddr>, extra: &[&str]) -> NodeProc {
        NodeProc(testkit::NodeProc::server_bin(bin(), id, seed, extra))
    }

    /// As [`NodeProc::server`], with extra environment variables for the process (e.g.
    /// `LATTICEKV_FAULT`): [`testkit::NodeProc::server_bin_env`].
    pub fn server_env(
        id: &str,
        seed: Option<SocketAddr>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> NodeProc {
        NodeProc(testkit::NodeProc::server_bin_env(
            bin(),
            id,
            seed,
            extra,
            env,
        ))
    }

    /// Starts the binary with `base` and `extra` arguments and waits until it prints its
    /// addresses: [`testkit::NodeProc::spawn_bin`].
    pub fn spawn(base: &[&str], extra: &[&str]) -> NodeProc {
        NodeProc(testkit::NodeProc::spawn_bin(bin(), base, extra))
    }
}

impl Deref for NodeProc {
    type Target = testkit::NodeProc;

    fn deref(&self) -> &testkit::NodeProc {
        &self.0
    }
}

impl DerefMut for NodeProc {
    fn deref_mut(&mut self) -> &mut testkit::NodeProc {
        &mut self.0
    }
}
