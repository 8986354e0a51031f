//! Certificates and keys renewed without a restart (issue 41, item 9): a node loads its three
//! TLS files again on SIGHUP, and when any of them changes on disk (checked every
//! [`TLS_RELOAD_CHECK`]; a Kubernetes secret or cert-manager swaps them under the node).
//!
//! What is loaded is checked whole before it is used: a certificate without its key, or a key
//! that does not match it, leaves the node serving with what it had, and says which file is
//! wrong. New handshakes take the new certificate, key and CA at once: the servers' through a
//! certificate resolver and a client verifier that read [`Reloading`]'s current material, the
//! outgoing peer connections because `Channels` and the lanes dial anew with it. Connections
//! already open keep the identity they were made with, as TLS has it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::{Tls, TlsError, TlsFiles};
use crate::limits::TLS_RELOAD_CHECK;
use crate::NodeId;

/// A loaded [`Tls`] with what a server needs of it, checked: the certificate with its key, and
/// the client verifiers of its CA (one that demands a certificate, one that takes a client
/// without).
pub(super) struct Loaded {
    pub(super) tls: Tls,
    certified: Arc<CertifiedKey>,
    strict: Arc<dyn ClientCertVerifier>,
    lenient: Arc<dyn ClientCertVerifier>,
}

impl Loaded {
    pub(super) fn of(tls: Tls) -> Result<Loaded, TlsError> {
        let provider = rustls::crypto::ring::default_provider();
        let certified = CertifiedKey::from_der(tls.chain.clone(), tls.key.clone_key(), &provider)
            .map_err(|e| {
            TlsError::Setup(format!("the certificate and key do not match: {e}"))
        })?;
        let verifier = |client_certs: bool| {
            let builder = WebPkiClientVerifier::builder_with_provider(
                tls.roots.clone(),
                Arc::new(provider.clone()),
            );
            let builder = match client_certs {
                true => builder,
                false => builder.allow_unauthenticated(),
            };
            builder.build().map_err(|e| TlsError::Setup(e.to_string()))
        };
        Ok(Loaded {
            strict: verifier(true)?,
            lenient: verifier(false)?,
            certified: Arc::new(certified),
            tls,
        })
    }
}

/// The material in use, swapped whole on a reload.
pub(super) type Slot = Arc<RwLock<Arc<Loaded>>>;

fn current(slot: &Slot) -> Arc<Loaded> {
    slot.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A server's certificate: the slot's, at each handshake.
#[derive(Debug)]
pub(super) struct CurrentCert(pub(super) Slot);

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(current(&self.0).certified.clone())
    }
}

/// A server's check of client certificates: the slot's CA, at each handshake; `client_certs`
/// demands one.
#[derive(Debug)]
pub(super) struct CurrentVerifier {
    pub(super) slot: Slot,
    pub(super) client_certs: bool,
}

impl CurrentVerifier {
    fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        let loaded = current(&self.slot);
        match self.client_certs {
            true => loaded.strict.clone(),
            false => loaded.lenient.clone(),
        }
    }
}

impl ClientCertVerifier for CurrentVerifier {
    fn offer_client_auth(&self) -> bool {
        self.verifier().offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.verifier().client_auth_mandatory()
    }

    /// No CA names are hinted (they could not be lent out of a slot that may change): a
    /// client with one certificate shows it regardless, and each of ours has one.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        (self.verifier()).verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Loaded TLS material")
    }
}

/// What a file looked like when it was last loaded: a change to any part is a new file (a
/// secret's files are swapped by a symlink, which changes the inode).
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

/// A node's TLS files and the material last loaded from them.
pub struct Reloading {
    files: TlsFiles,
    /// The node whose certificate the files must hold: another node's would cut it off from
    /// its peers, which check the name.
    node: Option<NodeId>,
    slot: Slot,
    /// The files' stamps at the last load tried, successful or not: a bad file is reported
    /// once, and tried again once it changes.
    seen: Mutex<[Stamp; 3]>,
    /// How many times new material was put in use, for the peer channels made with the old.
    generation: AtomicU64,
}

impl Reloading {
    /// Loads `files` at start, for `node` if given (its certificate must name it); any
    /// problem refuses the start, naming the file.
    pub fn load(files: &TlsFiles, node: Option<NodeId>) -> Result<Arc<Reloading>, TlsError> {
        let seen = Mutex::new(Reloading::stamps(files));
        let loaded = Reloading::loaded(files, node)?;
        Ok(Arc::new(Reloading {
            files: files.clone(),
            node,
            slot: Arc::new(RwLock::new(Arc::new(loaded))),
            seen,
            generation: AtomicU64::new(0),
        }))
    }

    /// The files' material, checked whole: for `node`, a certificate that names it.
    fn loaded(files: &TlsFiles, node: Option<NodeId>) -> Result<Loaded, TlsError> {
        let tls = Tls::load(files)?;
        if let Some(id) = node {
            if super::member_named(&tls.chain[0], [id]).is_none() {
                return Err(super::file_error(
                    &files.cert,
                    format!(
                        "the certificate does not name {}, this node (its peers check the \
                         name): give node {id} its own certificate",
                        super::node_name(id)
                    ),
                ));
            }
        }
        Loaded::of(tls)
    }

    fn stamps(files: &TlsFiles) -> [Stamp; 3] {
        [stamp(&files.ca), stamp(&files.cert), stamp(&files.key)]
    }

    /// The material in use now, to dial with.
    pub fn tls(&self) -> Tls {
        current(&self.slot).tls.clone()
    }

    /// Changes each time new material is put in use.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// A server's TLS settings that take whatever is in use at each handshake (see
    /// [`Tls::server_config`]).
    pub fn server_config(&self, client_certs: bool) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        super::server_config_on(&self.slot, client_certs)
    }

    /// Loads the files again and puts them in use if they are whole and new (`Ok(false)`
    /// when they hold what is in use already); `Err` naming the file that is not whole, and
    /// what is in use stays.
    pub fn reload(&self) -> Result<bool, TlsError> {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Reloading::stamps(&self.files);
        let loaded = Reloading::loaded(&self.files, self.node)?;
        let current = current(&self.slot);
        if loaded.tls.same_files_as(&current.tls) {
            return Ok(false);
        }
        *self.slot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
        self.generation.fetch_add(1, Relaxed);
        Ok(true)
    }

    /// Whether a file changed since the last load tried.
    fn changed_on_disk(&self) -> bool {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) != Reloading::stamps(&self.files)
    }

    /// [`Reloading::reload`], logged: `why` it was asked.
    pub fn reload_logged(&self, why: &str) {
        match self.reload() {
            Ok(true) => {
                tracing::info!(cert = %self.files.cert.display(), "TLS files loaded again ({why}): new connections use them")
            }
            Ok(false) => tracing::info!("TLS files read again ({why}): unchanged"),
            Err(e) => tracing::error!(
                "TLS files not loaded again ({why}): {e}; the node goes on with those it had"
            ),
        }
    }

    /// Reloads on each change of the files, checked every [`TLS_RELOAD_CHECK`], until dropped.
    pub async fn on_change(self: Arc<Self>) {
        let mut every = tokio::time::interval(TLS_RELOAD_CHECK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if self.changed_on_disk() {
                self.reload_logged("a file changed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_puts_new_files_in_use_and_a_bad_one_leaves_the_old_in_use() {
        let dir = tempfile::TempDir::new().unwrap();
        let set = super::super::certs::ensure(dir.path(), 2).unwrap();
        let files = set.node(1);
        let tls = Reloading::load(&files, Some(1)).unwrap();
        let first = tls.tls().chain[0].clone();
        assert!(!tls.changed_on_disk());
        assert!(
            !tls.reload().unwrap(),
            "unchanged files are not put in use again"
        );
        assert_eq!(tls.generation(), 0);

        // Node 2's key under node 1's certificate: refused, node 1's material stays.
        std::fs::copy(set.node(2).key, &files.key).unwrap();
        assert!(tls.changed_on_disk());
        let refused = tls.reload().unwrap_err().to_string();
        assert!(refused.contains("do not match"), "{refused}");
        assert_eq!(tls.tls().chain[0], first);
        assert!(!tls.changed_on_disk(), "a bad file is tried once");

        // Node 2's certificate with its key: whole, but not node 1's.
        std::fs::copy(set.node(2).cert, &files.cert).unwrap();
        let refused = tls.reload().unwrap_err().to_string();
        assert!(
            refused.contains("does not name leasehold-node-1"),
            "{refused}"
        );
        assert_eq!(
            (tls.tls().chain[0].clone(), tls.generation()),
            (first.clone(), 0)
        );

        // Node 1's renewed certificate: in use.
        set.issue_node(1, None).unwrap();
        assert!(tls.changed_on_disk());
        assert!(tls.reload().unwrap());
        assert_ne!(tls.tls().chain[0], first);
        assert_eq!(tls.generation(), 1);
    }
}
