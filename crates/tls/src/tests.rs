//! Handshakes over real loopback sockets with certificates of a throwaway CA.

use std::sync::Arc;

use testkit::Pki;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The DER of the certificate the server at `addr` presents to a client trusting `ca`.
async fn presented(addr: std::net::SocketAddr, ca: &Path) -> Vec<u8> {
    let connector = TlsConnector::from(client_config(roots(Some(ca)).unwrap(), None).unwrap());
    let tcp = TcpStream::connect(addr).await.unwrap();
    let stream = Stream::connect(&connector, server_name("127.0.0.1:1").unwrap(), tcp)
        .await
        .unwrap();
    match stream {
        Stream::Client(s) => s.get_ref().1.peer_certificates().unwrap()[0].to_vec(),
        _ => unreachable!(),
    }
}

/// Serves echo connections with `config` until the runtime stops.
async fn echo_server(config: Arc<rustls::ServerConfig>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut s) = Stream::accept(&acceptor, tcp).await else {
                    return;
                };
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() || s.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_client_trusting_the_ca_talks_to_the_server_and_one_trusting_another_ca_cannot() {
    let pki = Pki::new("test CA");
    let other = Pki::new("another CA");
    let leaf = pki.leaf("node", &["127.0.0.1", "localhost"]);
    let id = Identity::load(&leaf.cert, &leaf.key).unwrap();
    rt().block_on(async {
        let addr = echo_server(server_config(id, ClientAuth::None).unwrap()).await;
        let good = TlsConnector::from(client_config(roots(Some(&pki.ca)).unwrap(), None).unwrap());
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut s = Stream::connect_maybe(Some(&good), &addr.to_string(), tcp)
            .await
            .unwrap();
        assert!(matches!(s, Stream::Client(_)));
        s.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");

        let bad = TlsConnector::from(client_config(roots(Some(&other.ca)).unwrap(), None).unwrap());
        let tcp = TcpStream::connect(addr).await.unwrap();
        let e = Stream::connect_maybe(Some(&bad), &addr.to_string(), tcp)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("certificate"), "{e}");

        // The right CA, but a name the certificate does not hold.
        let tcp = TcpStream::connect(addr).await.unwrap();
        let e = Stream::connect(&good, server_name("elsewhere.example:1").unwrap(), tcp)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("certificate"), "{e}");
    });
}

#[test]
fn with_a_client_ca_the_server_refuses_clients_without_a_certificate_it_signed() {
    let pki = Pki::new("cluster CA");
    let stranger_pki = Pki::new("stranger CA");
    let server = pki.leaf("server", &["127.0.0.1"]);
    let member = pki.leaf("member", &["127.0.0.1"]);
    let stranger = stranger_pki.leaf("stranger", &["127.0.0.1"]);
    let id = Identity::load(&server.cert, &server.key).unwrap();
    rt().block_on(async {
        let config =
            server_config(id, ClientAuth::Required(roots(Some(&pki.ca)).unwrap())).unwrap();
        let addr = echo_server(config).await;
        let roundtrip = |identity: Option<Arc<Identity>>| {
            let ca = pki.ca.clone();
            async move {
                let c = client_config(roots(Some(&ca)).unwrap(), identity).unwrap();
                let tcp = TcpStream::connect(addr).await.unwrap();
                let mut s =
                    Stream::connect_maybe(Some(&TlsConnector::from(c)), "127.0.0.1:1", tcp).await?;
                // TLS 1.3: a refused client certificate shows on the first read.
                s.write_all(b"x").await?;
                let mut got = [0u8; 1];
                s.read_exact(&mut got).await?;
                Ok::<_, std::io::Error>(got)
            }
        };
        let member_id = Identity::load(&member.cert, &member.key).unwrap();
        assert_eq!(roundtrip(Some(member_id)).await.unwrap(), *b"x");
        assert!(roundtrip(None).await.is_err(), "no client certificate");
        let stranger_id = Identity::load(&stranger.cert, &stranger.key).unwrap();
        assert!(
            roundtrip(Some(stranger_id)).await.is_err(),
            "signed by another CA"
        );
    });
}

#[test]
fn a_reload_changes_the_certificate_of_new_handshakes_and_a_broken_file_keeps_the_old() {
    let pki = Pki::new("test CA");
    let leaf = pki.leaf("node", &["127.0.0.1"]);
    let id = Identity::load(&leaf.cert, &leaf.key).unwrap();
    assert!(!id.reload_if_changed().unwrap(), "nothing changed");
    rt().block_on(async {
        let addr = echo_server(server_config(id.clone(), ClientAuth::None).unwrap()).await;
        let first = presented(addr, &pki.ca).await;
        // A new certificate under the same file names.
        let again = pki.leaf("node", &["127.0.0.1"]);
        assert_eq!(again.cert, leaf.cert);
        assert!(id.reload_if_changed().unwrap(), "the files changed");
        let second = presented(addr, &pki.ca).await;
        assert_ne!(first, second);
        // A half-written certificate: an error, and the server keeps presenting the second.
        std::fs::write(&leaf.cert, b"-----BEGIN CERTIFICATE-----\nMIIB").unwrap();
        assert!(id.reload_if_changed().is_err());
        assert_eq!(presented(addr, &pki.ca).await, second);
    });
}

#[test]
fn a_tls_connection_moves_to_another_thread_with_what_it_buffered() {
    let pki = Pki::new("test CA");
    let leaf = pki.leaf("node", &["127.0.0.1"]);
    let id = Identity::load(&leaf.cert, &leaf.key).unwrap();
    let acceptor = TlsAcceptor::from(server_config(id, ClientAuth::None).unwrap());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let ca = pki.ca.clone();
    let client = std::thread::spawn(move || {
        rt().block_on(async {
            let c = TlsConnector::from(client_config(roots(Some(&ca)).unwrap(), None).unwrap());
            let tcp = TcpStream::connect(addr).await.unwrap();
            let mut s = Stream::connect_maybe(Some(&c), "127.0.0.1:1", tcp)
                .await
                .unwrap();
            // Two messages in one write: the first thread reads only the first.
            s.write_all(b"hello!world").await.unwrap();
            let mut got = [0u8; 5];
            s.read_exact(&mut got).await.unwrap();
            got
        })
    });
    let detached = rt().block_on(async {
        let listener = TcpListener::from_std(listener).unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let mut s = Stream::accept(&acceptor, tcp).await.unwrap();
        let mut hello = [0u8; 6];
        s.read_exact(&mut hello).await.unwrap();
        assert_eq!(&hello, b"hello!");
        s.detach().unwrap()
    });
    std::thread::spawn(move || {
        rt().block_on(async {
            let mut s = detached.attach().unwrap();
            let mut rest = [0u8; 5];
            s.read_exact(&mut rest).await.unwrap();
            assert_eq!(&rest, b"world");
            s.write_all(b"moved").await.unwrap();
            // A TLS stream may hold written bytes until flushed.
            s.flush().await.unwrap();
        })
    })
    .join()
    .unwrap();
    assert_eq!(&client.join().unwrap(), b"moved");
}

#[test]
fn bad_files_are_clear_errors() {
    let pki = Pki::new("test CA");
    let a = pki.leaf("a", &["127.0.0.1"]);
    let b = pki.leaf("b", &["127.0.0.1"]);
    let e = Identity::load(&a.cert, &b.key).unwrap_err();
    assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
    let e = Identity::load(&pki.dir().join("missing.pem"), &a.key).unwrap_err();
    assert!(e.to_string().contains("missing.pem"), "{e}");
    let e = Identity::load(&a.key, &a.key).unwrap_err();
    assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
    let e = Identity::load(&a.cert, &a.cert).unwrap_err();
    assert!(matches!(e, TlsError::BadKey { .. }), "{e}");
}

#[test]
fn server_names_come_from_the_host_of_an_address() {
    let name = |a: &str| server_name(a).map(|n| n.to_str().into_owned());
    assert_eq!(name("127.0.0.1:7700").unwrap(), "127.0.0.1");
    assert_eq!(name("node-1.example:7700").unwrap(), "node-1.example");
    assert_eq!(name("[::1]:7700").unwrap(), "::1");
    assert_eq!(name("localhost").unwrap(), "localhost");
    assert!(name(":7700").is_err());
}
