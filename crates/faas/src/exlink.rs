//! The host's end of its link to one executor: tasks out, outcomes in, through the socket
//! or, for large messages, through the executor's shared region ([`crate::shm`]).
//!
//! [`Regions`] holds the region the host made for each executor process it started, until
//! that process says hello: a connection gets the region only if its hello names the slot
//! and the process id the region was made for, and the region's size (the executor mapped
//! it). Anything else (an executor without the region, an older one, a process that is
//! not the host's child) talks through the socket only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prost::Message;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::conn;
use crate::pb;
use crate::shm::{Region, SHM_MIN};

/// The regions of started executors that have not said hello yet, by slot.
#[derive(Default)]
pub(crate) struct Regions(Mutex<HashMap<u32, (u32, Arc<Region>)>>);

impl Regions {
    /// `region` belongs to the executor process `pid` started for slot `id` (replacing a
    /// previous process's).
    pub(crate) fn offer(&self, id: u32, pid: u32, region: Arc<Region>) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(id, (pid, region));
        }
    }

    /// Drops slot `id`'s region if it is still `pid`'s (its process exited).
    pub(crate) fn withdraw(&self, id: u32, pid: u32) {
        if let Ok(mut m) = self.0.lock() {
            if m.get(&id).is_some_and(|(p, _)| *p == pid) {
                m.remove(&id);
            }
        }
    }

    /// The region for the executor whose hello is `hello`, taken out (one connection per
    /// process), if the hello matches it.
    pub(crate) fn claim(&self, hello: &pb::ExecutorHello) -> Option<Arc<Region>> {
        if hello.shm_bytes == 0 {
            return None;
        }
        let mut m = self.0.lock().ok()?;
        let (pid, region) = m.get(&hello.id)?;
        if *pid != hello.pid || region.len() as u64 != hello.shm_bytes {
            return None;
        }
        m.remove(&hello.id).map(|(_, r)| r)
    }
}

/// A connected executor's link, after its hello.
pub(crate) struct Link {
    r: OwnedReadHalf,
    w: OwnedWriteHalf,
    shm: Option<Arc<Region>>,
}

fn bad(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.to_string())
}

impl Link {
    pub(crate) fn new(r: OwnedReadHalf, w: OwnedWriteHalf, shm: Option<Arc<Region>>) -> Link {
        Link { r, w, shm }
    }

    /// Whether large messages go through a shared region.
    pub(crate) fn shared(&self) -> bool {
        self.shm.is_some()
    }

    /// The read half, to watch for the connection closing while idle.
    pub(crate) fn reader(&mut self) -> &mut OwnedReadHalf {
        &mut self.r
    }

    /// Sends `msg`: a large one into the region and its length through the socket.
    pub(crate) async fn send(&mut self, msg: &pb::ToExecutor) -> std::io::Result<()> {
        if let Some(region) = &self.shm {
            if msg.encoded_len() >= SHM_MIN {
                if let Some(len) = region.put(msg) {
                    let frame = pb::ToExecutor {
                        msg: Some(pb::to_executor::Msg::Shm(pb::ShmFrame { len: len as u64 })),
                    };
                    return conn::write(&mut self.w, &frame).await;
                }
            }
        }
        conn::write(&mut self.w, msg).await
    }

    /// The executor's next message (one sent through the region copied out and decoded);
    /// `Ok(None)` at the end of the stream.
    ///
    /// # Errors
    /// I/O and frame errors of [`conn::read`]; a region frame without a region, past its
    /// end, or holding another region frame or a hello.
    pub(crate) async fn recv(&mut self) -> std::io::Result<Option<pb::FromExecutor>> {
        let Some(msg) = conn::read::<pb::FromExecutor, _>(&mut self.r).await? else {
            return Ok(None);
        };
        let Some(pb::from_executor::Msg::Shm(f)) = &msg.msg else {
            return Ok(Some(msg));
        };
        let region = self
            .shm
            .as_ref()
            .ok_or_else(|| bad("a shared-region frame on a link without one"))?;
        let len = usize::try_from(f.len).map_err(|_| bad("a shared-region frame too long"))?;
        let inner = pb::FromExecutor::decode(region.copy(len)?)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        match inner {
            pb::FromExecutor {
                msg: Some(pb::from_executor::Msg::Done(_)),
            } => Ok(Some(inner)),
            _ => Err(bad("a shared-region frame that is not a task's outcome")),
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use bytes::Bytes;

    use tokio::net::{TcpListener, TcpStream};

    /// A connected pair: the host's link (with `shm`) and the executor's stream.
    async fn pair(shm: Option<Arc<Region>>) -> (Link, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let exec = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (host, _) = l.accept().await.unwrap();
        let (r, w) = host.into_split();
        (Link::new(r, w, shm), exec)
    }

    fn task(n: usize) -> pb::ToExecutor {
        pb::ToExecutor {
            msg: Some(pb::to_executor::Msg::Task(pb::Task {
                id: 11,
                function: "f".into(),
                code: Bytes::from_static(b"c"),
                args: vec![pb::TaskArg {
                    kind: Some(pb::task_arg::Kind::Value(Bytes::from(vec![4u8; n]))),
                }],
            })),
        }
    }

    fn done(n: usize) -> pb::FromExecutor {
        pb::FromExecutor {
            msg: Some(pb::from_executor::Msg::Done(pb::TaskDone {
                id: 11,
                result: Some(pb::task_done::Result::Value(Bytes::from(vec![5u8; n]))),
                ..Default::default()
            })),
        }
    }

    fn shm_frame(len: usize) -> pb::FromExecutor {
        pb::FromExecutor {
            msg: Some(pb::from_executor::Msg::Shm(pb::ShmFrame {
                len: len as u64,
            })),
        }
    }

    #[tokio::test]
    async fn a_large_task_and_its_outcome_cross_the_region_and_small_ones_the_socket() {
        let host_region = Arc::new(Region::create(4 << 20).unwrap());
        let exec_region =
            Arc::new(Region::map(host_region.fd().try_clone_to_owned().unwrap()).unwrap());
        let (mut link, mut exec) = pair(Some(host_region)).await;
        assert!(link.shared());

        let big = task(1 << 20);
        link.send(&big).await.unwrap();
        let got: pb::ToExecutor = conn::read(&mut exec).await.unwrap().unwrap();
        let Some(pb::to_executor::Msg::Shm(f)) = got.msg else {
            panic!("a 1 MB task went through the socket: {got:?}")
        };
        // SAFETY: the host writes nothing until this side answers.
        let body = unsafe { exec_region.view(f.len as usize) }.unwrap();
        assert_eq!(pb::ToExecutor::decode(body).unwrap(), big);

        let out = done(1 << 20);
        let len = exec_region.put(&out).unwrap();
        conn::write(&mut exec, &shm_frame(len)).await.unwrap();
        assert_eq!(link.recv().await.unwrap().unwrap(), out);

        // Small messages take the socket both ways.
        let small = task(100);
        link.send(&small).await.unwrap();
        let got: pb::ToExecutor = conn::read(&mut exec).await.unwrap().unwrap();
        assert_eq!(got, small);
        conn::write(&mut exec, &done(10)).await.unwrap();
        assert_eq!(link.recv().await.unwrap().unwrap(), done(10));
    }

    #[tokio::test]
    async fn without_a_region_everything_takes_the_socket_and_region_frames_are_refused() {
        let (mut link, mut exec) = pair(None).await;
        assert!(!link.shared());
        let big = task(1 << 20);
        // More than a socket buffer: read while it is written.
        let (sent, got) = tokio::join!(link.send(&big), conn::read(&mut exec));
        sent.unwrap();
        let got: pb::ToExecutor = got.unwrap().unwrap();
        assert_eq!(got, big);
        conn::write(&mut exec, &shm_frame(10)).await.unwrap();
        let err = link.recv().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn a_region_frame_past_the_region_or_holding_no_outcome_is_an_error() {
        let host_region = Arc::new(Region::create(1 << 16).unwrap());
        let exec_region = Region::map(host_region.fd().try_clone_to_owned().unwrap()).unwrap();
        let (mut link, mut exec) = pair(Some(host_region)).await;
        conn::write(&mut exec, &shm_frame((1 << 16) + 1))
            .await
            .unwrap();
        assert_eq!(
            link.recv().await.unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
        let (mut link, mut exec) = pair(link.shm.take()).await;
        let nested = exec_region.put(&shm_frame(5)).unwrap();
        conn::write(&mut exec, &shm_frame(nested)).await.unwrap();
        assert_eq!(
            link.recv().await.unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn a_region_goes_only_to_the_hello_of_its_slot_process_and_size_once() {
        let regions = Regions::default();
        let region = Arc::new(Region::create(1 << 16).unwrap());
        regions.offer(2, 100, region);
        let hello = |id, pid, shm_bytes| pb::ExecutorHello { id, pid, shm_bytes };
        assert!(
            regions.claim(&hello(2, 100, 0)).is_none(),
            "an executor without it"
        );
        assert!(
            regions.claim(&hello(2, 101, 1 << 16)).is_none(),
            "another process"
        );
        assert!(
            regions.claim(&hello(1, 100, 1 << 16)).is_none(),
            "another slot"
        );
        assert!(
            regions.claim(&hello(2, 100, 1 << 15)).is_none(),
            "another size"
        );
        assert!(regions.claim(&hello(2, 100, 1 << 16)).is_some());
        assert!(
            regions.claim(&hello(2, 100, 1 << 16)).is_none(),
            "claimed twice"
        );
        regions.offer(3, 7, Arc::new(Region::create(1 << 16).unwrap()));
        regions.withdraw(3, 8);
        regions.withdraw(3, 7);
        assert!(
            regions.claim(&hello(3, 7, 1 << 16)).is_none(),
            "its process exited"
        );
    }
}
