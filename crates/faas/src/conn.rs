//! Framed protobuf over TCP: the 4-byte length prefix of `wire::frame`, one message per
//! frame, used on every connection of the layer.
//!
//! A frame is written vectored ([`frame_parts`]): large `bytes` fields of the message (a
//! task's values, a function's result) go to the socket from their own buffers, not
//! through a copy into one contiguous frame. The bytes on the wire are those of
//! `wire::frame::try_encode`.

use std::io::IoSlice;

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Upper bound on one frame of this layer (functions' code and arguments included).
pub const MAX_FRAME: usize = wire::frame::DEFAULT_MAX_FRAME;

/// Reads one message; `Ok(None)` at a clean end of stream (between frames).
///
/// # Errors
/// I/O errors, a frame over [`MAX_FRAME`], or a body that does not decode.
pub async fn read<M: Message + Default, R: AsyncReadExt + Unpin>(
    r: &mut R,
) -> std::io::Result<Option<M>> {
    let mut header = [0u8; wire::frame::HEADER_LEN];
    match r.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"),
        ));
    }
    // Read into uninitialised capacity (no zeroing of a large body first), then decode from
    // `Bytes`: the message's `bytes` fields are views of this one buffer, not copies (a
    // function's result goes on to the next task without a pass over it).
    let mut body = Vec::with_capacity(len);
    let got = (&mut *r).take(len as u64).read_to_end(&mut body).await?;
    if got != len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("frame of {len} bytes ended after {got}"),
        ));
    }
    M::decode(Bytes::from(body))
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// `bytes` fields at least this long are written from their own buffers, not copied into
/// the frame.
pub const SCATTER_MIN: usize = 16 * 1024;

/// Writes one message as a frame, vectored ([`frame_parts`]).
///
/// # Errors
/// I/O errors, or a message over 4 GiB.
pub async fn write<M: Message, W: AsyncWriteExt + Unpin>(
    w: &mut W,
    msg: &M,
) -> std::io::Result<()> {
    let mut parts = frame_parts(msg)?;
    if let [one] = &parts[..] {
        return w.write_all(one).await;
    }
    let mut first = 0;
    while first < parts.len() {
        let slices: Vec<IoSlice<'_>> = parts[first..].iter().map(|p| IoSlice::new(p)).collect();
        let n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        written(&mut parts, &mut first, n);
    }
    Ok(())
}

/// Drops the `n` bytes a vectored write took from the front of `parts[*first..]`, moving
/// `first` past the parts written in full (`n` is at most what those parts hold, as a
/// write returns).
pub fn written(parts: &mut [Bytes], first: &mut usize, mut n: usize) {
    while n > 0 {
        let Some(part) = parts.get_mut(*first) else {
            return;
        };
        let take = n.min(part.len());
        part.advance(take);
        n -= take;
        if part.is_empty() {
            *first += 1;
        }
    }
}

/// `msg` as one frame of `wire::frame` (length prefix, body), as the buffers to write in
/// order: every `bytes` field of at least [`SCATTER_MIN`] bytes held as [`Bytes`] is a part
/// of its own, a view of the message's buffer (no copy); everything else is encoded into
/// the parts between. None is empty.
///
/// # Errors
/// A message over 4 GiB (`InvalidInput`).
pub fn frame_parts<M: Message>(msg: &M) -> std::io::Result<Vec<Bytes>> {
    let len = msg.encoded_len();
    let header = u32::try_from(len).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a message of {len} bytes does not fit a frame"),
        )
    })?;
    let mut out = Scatter {
        parts: Vec::new(),
        small: BytesMut::with_capacity((wire::frame::HEADER_LEN + len).min(SCATTER_MIN)),
    };
    out.small.put_slice(&header.to_be_bytes());
    msg.encode(&mut out)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    out.flush();
    Ok(out.parts)
}

/// The encoder of [`frame_parts`]: a [`BufMut`] that keeps large [`Buf`]s put into it
/// (prost puts a `Bytes` field with [`BufMut::put`]) as parts of their own.
struct Scatter {
    parts: Vec<Bytes>,
    /// What was encoded since the last large part.
    small: BytesMut,
}

impl Scatter {
    fn flush(&mut self) {
        if !self.small.is_empty() {
            self.parts.push(self.small.split().freeze());
        }
    }
}

// SAFETY: every method delegates to `BytesMut`'s (the trait's contract holds for it); `put`
// only adds whole parts besides it.
unsafe impl BufMut for Scatter {
    fn remaining_mut(&self) -> usize {
        self.small.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut`, which is `small`'s.
        unsafe { self.small.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.small.chunk_mut()
    }

    fn put<T: Buf>(&mut self, mut src: T)
    where
        Self: Sized,
    {
        let n = src.remaining();
        if n >= SCATTER_MIN {
            self.flush();
            // For `Bytes` this is a view, not a copy.
            self.parts.push(src.copy_to_bytes(n));
        } else {
            self.small.put(src);
        }
    }

    fn put_slice(&mut self, src: &[u8]) {
        self.small.put_slice(src);
    }
}

/// Spawns a task writing every message of the returned channel to `w`, in order. The
/// channel is bounded (`capacity`): a slow peer slows its senders instead of growing
/// memory. The task ends when every sender is dropped or a write fails.
pub fn writer<M, W>(mut w: W, capacity: usize) -> tokio::sync::mpsc::Sender<M>
where
    M: Message + Send + 'static,
    W: AsyncWriteExt + Unpin + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel::<M>(capacity);
    tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            if write(&mut w, &msg).await.is_err() {
                break;
            }
        }
        let _ = w.shutdown().await;
    });
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;

    fn task(values: Vec<Bytes>) -> pb::ToExecutor {
        pb::ToExecutor {
            msg: Some(pb::to_executor::Msg::Task(pb::Task {
                id: 7,
                function: "f".into(),
                code: Bytes::from_static(b"code"),
                args: vec![
                    pb::TaskArg {
                        kind: Some(pb::task_arg::Kind::Key(pb::KeyRead {
                            key: Bytes::from_static(b"k"),
                            found: true,
                            values,
                            meta: Bytes::from_static(b"m"),
                        })),
                    },
                    pb::TaskArg {
                        kind: Some(pb::task_arg::Kind::Value(Bytes::from_static(b"v"))),
                    },
                ],
            })),
        }
    }

    #[test]
    fn a_frame_in_parts_is_the_contiguous_frame_and_large_values_are_not_copied() {
        let big = Bytes::from(vec![5u8; 3 * SCATTER_MIN]);
        let small = Bytes::from(vec![6u8; SCATTER_MIN - 1]);
        let msg = task(vec![big.clone(), small.clone(), big.clone()]);
        let parts = frame_parts(&msg).unwrap();
        let mut contiguous = Vec::new();
        wire::frame::try_encode(&msg, &mut contiguous).unwrap();
        assert_eq!(parts.concat(), contiguous);
        // header+fields, big, the fields around the small value, big, the rest
        assert_eq!(parts.len(), 5);
        assert!(parts.iter().all(|p| !p.is_empty()));
        let views: Vec<&Bytes> = parts
            .iter()
            .filter(|p| p.as_ptr() == big.as_ptr())
            .collect();
        assert_eq!(views.len(), 2, "the large values were copied");
        assert!(parts.iter().all(|p| p.as_ptr() != small.as_ptr()));
        // A message with nothing large is one part.
        let one = frame_parts(&task(vec![small])).unwrap();
        assert_eq!(one.len(), 1);
    }

    #[tokio::test]
    async fn a_vectored_frame_reads_back_through_a_small_pipe() {
        // A pipe much smaller than the frame: the vectored write resumes after partial
        // writes, inside a part and across parts.
        let (mut a, mut b) = tokio::io::duplex(1000);
        let values = vec![
            Bytes::from((0..50_000u32).map(|i| i as u8).collect::<Vec<u8>>()),
            Bytes::from(vec![1u8; 10]),
            Bytes::from(vec![2u8; 70_000]),
        ];
        let msg = task(values);
        let sent = msg.clone();
        let writer = tokio::spawn(async move {
            write(&mut a, &sent).await.unwrap();
            write(&mut a, &sent).await.unwrap();
        });
        for _ in 0..2 {
            let got: pb::ToExecutor = read(&mut b).await.unwrap().unwrap();
            assert_eq!(got, msg);
        }
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn a_frame_cut_short_or_too_long_is_an_error_and_a_clean_end_is_none() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let mut frame = Vec::new();
        wire::frame::try_encode(&task(vec![Bytes::from(vec![3u8; 100])]), &mut frame).unwrap();
        a.write_all(&frame[..frame.len() - 1]).await.unwrap();
        drop(a);
        let err = read::<pb::ToExecutor, _>(&mut b).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);

        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        let err = read::<pb::ToExecutor, _>(&mut b).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);

        let (a, mut b) = tokio::io::duplex(16);
        drop(a);
        assert!(read::<pb::ToExecutor, _>(&mut b).await.unwrap().is_none());
    }
}
