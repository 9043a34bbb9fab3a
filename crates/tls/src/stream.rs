//! A TCP connection, plain or TLS, that can move between runtimes.
//!
//! A tokio socket belongs to the runtime that registered it, so a node that accepts a
//! connection on one thread and serves it on another turns it back into a std socket in
//! between. A TLS connection is more than its socket: [`Stream::detach`] keeps the TLS
//! session (with whatever it has buffered) beside the std socket, and
//! [`Detached::attach`] puts them together again on the serving thread.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

/// The socket under a TLS session; empty while the session moves between threads.
#[derive(Debug)]
pub struct Slot(Option<TcpStream>);

fn detached() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "connection moved to another thread",
    )
}

impl AsyncRead for Slot {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.0 {
            Some(s) => Pin::new(s).poll_read(cx, buf),
            None => Poll::Ready(Err(detached())),
        }
    }
}

impl AsyncWrite for Slot {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.0 {
            Some(s) => Pin::new(s).poll_write(cx, buf),
            None => Poll::Ready(Err(detached())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.0 {
            Some(s) => Pin::new(s).poll_flush(cx),
            None => Poll::Ready(Err(detached())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.0 {
            Some(s) => Pin::new(s).poll_shutdown(cx),
            None => Poll::Ready(Err(detached())),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.0 {
            Some(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            None => Poll::Ready(Err(detached())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}

/// A connection: plain TCP, or TLS as the server or the client side.
#[derive(Debug)]
pub enum Stream {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS, accepted.
    Server(Box<server::TlsStream<Slot>>),
    /// TLS, connected.
    Client(Box<client::TlsStream<Slot>>),
}

/// A [`Stream`] between threads: its socket as a std socket, and its TLS session if any.
#[derive(Debug)]
pub struct Detached {
    tcp: std::net::TcpStream,
    tls: Option<Session>,
}

#[derive(Debug)]
enum Session {
    Server(Box<server::TlsStream<Slot>>),
    Client(Box<client::TlsStream<Slot>>),
}

impl Stream {
    /// Runs the server side of a TLS handshake on `tcp`.
    pub async fn accept(acceptor: &TlsAcceptor, tcp: TcpStream) -> io::Result<Stream> {
        let tls = acceptor.accept(Slot(Some(tcp))).await?;
        Ok(Stream::Server(Box::new(tls)))
    }

    /// Runs the client side of a TLS handshake on `tcp` with a server that must prove it is
    /// `name`.
    pub async fn connect(
        connector: &TlsConnector,
        name: ServerName<'static>,
        tcp: TcpStream,
    ) -> io::Result<Stream> {
        let tls = connector.connect(name, Slot(Some(tcp))).await?;
        Ok(Stream::Client(Box::new(tls)))
    }

    /// Accepts `tcp` with TLS if `acceptor` is given, as plain TCP if not.
    pub async fn accept_maybe(acceptor: Option<&TlsAcceptor>, tcp: TcpStream) -> io::Result<Self> {
        match acceptor {
            Some(a) => Stream::accept(a, tcp).await,
            None => Ok(Stream::Tcp(tcp)),
        }
    }

    /// Connects over `tcp` with TLS (as `addr`'s host) if `connector` is given, plain if not.
    pub async fn connect_maybe(
        connector: Option<&TlsConnector>,
        addr: &str,
        tcp: TcpStream,
    ) -> io::Result<Self> {
        match connector {
            Some(c) => {
                let name = crate::server_name(addr)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
                Stream::connect(c, name, tcp).await
            }
            None => Ok(Stream::Tcp(tcp)),
        }
    }

    /// The TCP socket underneath.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Tcp(s) => Some(s),
            Stream::Server(s) => s.get_ref().0 .0.as_ref(),
            Stream::Client(s) => s.get_ref().0 .0.as_ref(),
        }
    }

    /// True if the other side presented a certificate the configuration verified (a
    /// server asking for client certificates; always true of a client's server).
    pub fn peer_verified(&self) -> bool {
        match self {
            Stream::Tcp(_) => false,
            Stream::Server(s) => s.get_ref().1.peer_certificates().is_some(),
            Stream::Client(s) => s.get_ref().1.peer_certificates().is_some(),
        }
    }

    /// Sets `TCP_NODELAY` on the socket.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match self.tcp() {
            Some(s) => s.set_nodelay(on),
            None => Err(detached()),
        }
    }

    /// Takes the connection off this thread's runtime, to [`attach`](Detached::attach) it on
    /// another.
    pub fn detach(self) -> io::Result<Detached> {
        fn take(slot: &mut Slot) -> io::Result<std::net::TcpStream> {
            slot.0.take().ok_or_else(detached)?.into_std()
        }
        match self {
            Stream::Tcp(s) => Ok(Detached {
                tcp: s.into_std()?,
                tls: None,
            }),
            Stream::Server(mut s) => Ok(Detached {
                tcp: take(s.get_mut().0)?,
                tls: Some(Session::Server(s)),
            }),
            Stream::Client(mut s) => Ok(Detached {
                tcp: take(s.get_mut().0)?,
                tls: Some(Session::Client(s)),
            }),
        }
    }
}

impl Detached {
    /// Registers the connection with the current thread's runtime (call within one).
    pub fn attach(self) -> io::Result<Stream> {
        let tcp = TcpStream::from_std(self.tcp)?;
        Ok(match self.tls {
            None => Stream::Tcp(tcp),
            Some(Session::Server(mut s)) => {
                s.get_mut().0 .0 = Some(tcp);
                Stream::Server(s)
            }
            Some(Session::Client(mut s)) => {
                s.get_mut().0 .0 = Some(tcp);
                Stream::Client(s)
            }
        })
    }
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => {
                let $s = Pin::new($s);
                $e
            }
            Stream::Server($s) => {
                let $s = Pin::new(&mut **$s);
                $e
            }
            Stream::Client($s) => {
                let $s = Pin::new(&mut **$s);
                $e
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Server(s) => s.is_write_vectored(),
            Stream::Client(s) => s.is_write_vectored(),
        }
    }
}
