//! TLS for both planes, with rustls. The peer plane is mutual TLS only: a peer presents a
//! certificate from the cluster's CA that names a member (`leasehold-node-ID`), or it is
//! refused before any of its messages is decoded. The client plane serves TLS, and demands
//! client certificates from the same CA when asked to. Handshakes are done by our own accept
//! loop, not tonic's, so that every refused connection is logged with its reason (once per
//! address and reason, so a peer retrying every few milliseconds does not flood the log).

pub mod bearer;
pub mod certs;
mod reload;

pub use reload::Reloading;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::RootCertStore;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

use crate::connections::{Connections, Counted, KeepAlive};

use crate::limits::{
    ACCEPTED_QUEUE, HANDSHAKE_TIMEOUT, MAX_HANDSHAKES, MAX_REFUSALS_REMEMBERED, REFUSED_LINGER,
    REFUSED_LINGER_BYTES,
};
use crate::NodeId;

/// The name a node's certificate carries, and peers check for when they dial it.
pub fn node_name(id: NodeId) -> String {
    format!("leasehold-node-{id}")
}

/// The three files a TLS-speaking process is started with.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The CA that signs every node's and client's certificate.
    pub ca: PathBuf,
    /// This process's certificate, and its private key.
    pub cert: PathBuf,
    /// The private key of `cert`.
    pub key: PathBuf,
}

/// Why TLS could not be set up from the files given.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file is missing, unreadable or holds no usable certificate or key.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificates and key together.
    #[error("TLS setup: {0}")]
    Setup(String),
}

fn file_error(path: &Path, reason: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// A CA and an identity, loaded and checked once at start-up.
#[derive(Clone)]
pub struct Tls {
    ca_pem: Vec<u8>,
    roots: Arc<RootCertStore>,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
}

impl Tls {
    /// Reads and parses the three files; the error names the file and what is wrong with it.
    pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
        let read = |path: &Path| std::fs::read(path).map_err(|e| file_error(path, e));
        let ca_pem = read(&files.ca)?;
        let cert_pem = read(&files.cert)?;
        let key_pem = read(&files.key)?;
        let certs = |path: &Path, pem: &[u8]| {
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| file_error(path, format!("not a PEM certificate: {e}")))?;
            if certs.is_empty() {
                return Err(file_error(path, "holds no PEM certificate"));
            }
            Ok(certs)
        };
        let mut roots = RootCertStore::empty();
        for ca in certs(&files.ca, &ca_pem)? {
            roots
                .add(ca)
                .map_err(|e| file_error(&files.ca, format!("not a usable CA certificate: {e}")))?;
        }
        let chain = certs(&files.cert, &cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| file_error(&files.key, format!("not a PEM private key: {e}")))?;
        Ok(Tls {
            ca_pem,
            roots: Arc::new(roots),
            cert_pem,
            key_pem,
            chain,
            key: Arc::new(key),
        })
    }

    /// Whether `other` was loaded from files with the same contents.
    fn same_files_as(&self, other: &Tls) -> bool {
        (&self.ca_pem, &self.cert_pem, &self.key_pem)
            == (&other.ca_pem, &other.cert_pem, &other.key_pem)
    }

    /// What a client of either plane dials with: this CA to check the server, this identity to
    /// show it, and the name the server's certificate must carry (a node's, on the peer
    /// plane; the endpoint's host, when `None`).
    pub fn client_config(&self, server_name: Option<&str>) -> tonic::transport::ClientTlsConfig {
        let config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ));
        match server_name {
            Some(name) => config.domain_name(name),
            None => config,
        }
    }

    /// What a peer lane (`raft::lane`) dials with, with rustls itself: this CA to check the
    /// server, this identity to show it, and `alpn` to ask for.
    pub fn connector(&self, alpn: &[u8]) -> Result<tokio_rustls::TlsConnector, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_root_certificates(self.roots.clone())
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Setup(format!("the certificate and key do not match: {e}")))?;
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }

    /// A server's TLS settings; `client_certs` demands a certificate from this CA of every
    /// client at the handshake (the peer plane). Without it a client may still show one,
    /// checked the same way, to have an identity; one without a certificate may bring a bearer
    /// token instead, or is refused by the API where the node demands certificates.
    ///
    /// A node serves with [`Reloading::server_config`], which takes renewed files.
    pub fn server_config(&self, client_certs: bool) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let loaded = reload::Loaded::of(self.clone())?;
        server_config_on(&Arc::new(RwLock::new(Arc::new(loaded))), client_certs)
    }
}

/// A server's TLS settings that take the certificate and CA in `slot` at each handshake.
fn server_config_on(
    slot: &reload::Slot,
    client_certs: bool,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = reload::CurrentVerifier {
        slot: slot.clone(),
        client_certs,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_cert_resolver(Arc::new(reload::CurrentCert(slot.clone())));
    config.alpn_protocols = vec![leasehold_proto::wire::GRPC_ALPN.to_vec()];
    // No session resumption: a resumed session skips the client verifier, so a client whose
    // CA was dropped by a reload would still be let in. Clients keep their connections open,
    // so a full handshake per connection costs little.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// Which of `members` the certificate names, by [`node_name`]; `None` for a certificate of
/// no member (a client's, an outsider's).
/// The node any `leasehold-node-N` name of `cert` names, if one does.
pub(crate) fn node_named(cert: &CertificateDer<'_>) -> Option<NodeId> {
    let cert = webpki::EndEntityCert::try_from(cert).ok()?;
    let named = cert
        .valid_dns_names()
        .find_map(|name| name.strip_prefix("leasehold-node-")?.parse().ok());
    named
}

pub(crate) fn member_named(
    cert: &CertificateDer<'_>,
    members: impl IntoIterator<Item = NodeId>,
) -> Option<NodeId> {
    let cert = webpki::EndEntityCert::try_from(cert).ok()?;
    members.into_iter().find(|id| {
        ServerName::try_from(node_name(*id))
            .is_ok_and(|name| cert.verify_is_valid_for_subject_name(&name).is_ok())
    })
}

/// Logs a refusal the first time its reason is seen from an address.
#[derive(Clone, Default)]
pub(crate) struct RefusalLog(Arc<Mutex<HashSet<(IpAddr, String)>>>);

impl RefusalLog {
    pub fn refused(&self, plane: &str, from: Option<SocketAddr>, reason: &str) {
        let ip = from.map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip());
        let first = {
            let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if seen.len() >= MAX_REFUSALS_REMEMBERED {
                seen.clear();
            }
            seen.insert((ip, reason.to_owned()))
        };
        if first {
            tracing::warn!(plane, from = %ip, reason, "refused a connection (logged once per address and reason)");
        }
    }
}

/// TLS connections accepted on `listener`, handshaken with `config`; refused handshakes are
/// logged to `refusals` and never reach the server. Runs until the stream is dropped.
pub(crate) fn incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    connections: Connections,
    refusals: RefusalLog,
    keepalive: KeepAlive,
) -> ReceiverStream<std::io::Result<TlsStream<Counted<TcpStream>>>> {
    let plane = connections.plane();
    let (accepted, stream) = tokio::sync::mpsc::channel(ACCEPTED_QUEUE);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let (tcp, from) = tokio::select! {
                conn = connections.accept(&listener, keepalive) => conn,
                () = accepted.closed() => return,
            };
            let Ok(handshaking) = handshakes.clone().try_acquire_owned() else {
                refusals.refused(plane, Some(from), "too many TLS handshakes in flight");
                continue;
            };
            let acceptor = acceptor.clone();
            let accepted = accepted.clone();
            let refusals = refusals.clone();
            tokio::spawn(async move {
                let handshake = acceptor.accept(tcp).into_fallible();
                let (reason, refused) =
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(tls)) => {
                            drop(handshaking);
                            let _ = accepted.send(Ok(tls)).await;
                            return;
                        }
                        Ok(Err((e, tcp))) => (format!("TLS handshake failed: {e}"), Some(tcp)),
                        Err(_) => {
                            let s = HANDSHAKE_TIMEOUT.as_secs();
                            (format!("no TLS handshake within {s} s"), None)
                        }
                    };
                refusals.refused(plane, Some(from), &reason);
                if let Some(tcp) = refused {
                    linger(tcp).await;
                }
            });
        }
    });
    ReceiverStream::new(stream)
}

/// Closes a connection whose handshake failed so that its client reads the node's alert (sent
/// already): the write side first, then what the client still sends is read and dropped until
/// it closes too, for at most [`REFUSED_LINGER`]. Closed with its first request unread, the
/// connection would be reset, and the client would see a broken pipe instead of why.
async fn linger(mut tcp: Counted<TcpStream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tcp.shutdown().await;
    let drain = async {
        let mut buffer = [0u8; 4096];
        let mut read = 0;
        while read < REFUSED_LINGER_BYTES {
            match tcp.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(REFUSED_LINGER, drain).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn the_refusal_log_remembers_a_bounded_number_of_refusals() {
        let log = RefusalLog::default();
        for port in 0..(3 * MAX_REFUSALS_REMEMBERED as u16) {
            let from = SocketAddr::from(([127, 0, 0, 1], port));
            log.refused("client", Some(from), &format!("reason {port}"));
        }
        let remembered = log.0.lock().unwrap().len();
        assert!(
            (1..=MAX_REFUSALS_REMEMBERED).contains(&remembered),
            "{remembered}"
        );
    }

    /// Connections that never start their handshake hold at most `MAX_HANDSHAKES` slots; the
    /// next one is closed at once instead of holding a file descriptor of its own.
    #[tokio::test]
    async fn a_connection_past_the_handshakes_in_flight_is_closed_at_once() {
        let dir = tempfile::TempDir::new().unwrap();
        let certs = certs::ensure(dir.path(), 1).unwrap();
        let tls = Tls::load(&certs.node(1)).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let keepalive = KeepAlive {
            idle: Duration::from_secs(60),
            interval: Duration::from_secs(10),
            retries: 3,
        };
        let _incoming = incoming(
            listener,
            tls.server_config(false).unwrap(),
            // Room for every connection here: the handshakes' bound is under test.
            crate::connections::Connections::new("client", 2 * MAX_HANDSHAKES),
            RefusalLog::default(),
            keepalive,
        );
        let mut idle = Vec::new();
        for _ in 0..MAX_HANDSHAKES {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let mut past = TcpStream::connect(addr).await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(2), past.read(&mut [0; 16])).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the connection past the bound was kept: {read:?}"
        );
        // The ones in flight are still waited for.
        let read =
            tokio::time::timeout(Duration::from_millis(200), idle[0].read(&mut [0; 16])).await;
        assert!(read.is_err(), "{read:?}");
    }
}
