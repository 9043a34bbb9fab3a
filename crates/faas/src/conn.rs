//! Framed protobuf over TCP: the 4-byte length prefix of `wire::frame`, one message per
//! frame, used on every connection of the layer.

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
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    M::decode(&body[..])
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes one message as a frame.
///
/// # Errors
/// I/O errors, or a message over 4 GiB.
pub async fn write<M: Message, W: AsyncWriteExt + Unpin>(
    w: &mut W,
    msg: &M,
) -> std::io::Result<()> {
    let mut out = Vec::new();
    wire::frame::try_encode(msg, &mut out)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    w.write_all(&out).await
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
