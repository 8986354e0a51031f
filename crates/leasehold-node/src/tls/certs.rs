//! Certificates for `cluster --tls`: a CA, one certificate per node and one for clients, kept in
//! the cluster's dir and reused when it resumes. The CA's key is not kept, so no more can be
//! issued from it: delete the dir's `tls` folder to have a new set made. For a real deployment,
//! issue them from your own CA instead (the README's Security section says what each must name).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::{node_name, TlsFiles};

/// Why a set of certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A `--host` names neither an address nor a DNS name.
    #[error("{host:?} is neither an IP address nor a DNS name: {why}")]
    Host {
        /// The host, as given.
        host: String,
        /// Why rcgen refused it.
        why: rcgen::Error,
    },
    /// rcgen could not make a key or a certificate.
    #[error("making a certificate: {0}")]
    Make(#[from] rcgen::Error),
}

impl CertError {
    fn io(path: &Path, source: std::io::Error) -> CertError {
        CertError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Where `cluster --tls` keeps them, under its dir.
const SUBDIR: &str = "tls";
/// The name on the client certificate: any name that is no member's.
const CLIENT_NAME: &str = "leasehold-client";

/// The files of a cluster's certificates.
pub struct ClusterCerts {
    dir: PathBuf,
}

impl ClusterCerts {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// What node `id` serves with.
    pub fn node(&self, id: u64) -> TlsFiles {
        TlsFiles {
            ca: self.path("ca.pem"),
            cert: self.path(&format!("node-{id}.pem")),
            key: self.path(&format!("node-{id}-key.pem")),
        }
    }

    /// What a client shows.
    pub fn client(&self) -> TlsFiles {
        TlsFiles {
            ca: self.path("ca.pem"),
            cert: self.path("client.pem"),
            key: self.path("client-key.pem"),
        }
    }
}

/// The certificates under `dir`/tls for nodes 1 to `nodes`: made now if there are none yet.
pub fn ensure(dir: &Path, nodes: u64) -> Result<ClusterCerts, CertError> {
    write_set(&dir.join(SUBDIR), nodes, &[])
}

/// [`ensure`], each node's certificate also naming its entry in `node_ips` (node 1 the first),
/// for clients that dial nodes on addresses other than 127.0.0.1.
pub fn ensure_for(dir: &Path, nodes: u64, node_ips: &[IpAddr]) -> Result<ClusterCerts, CertError> {
    let hosts: Vec<String> = node_ips.iter().map(IpAddr::to_string).collect();
    write_set(&dir.join(SUBDIR), nodes, &hosts)
}

/// The set in `dir` itself, each node's certificate also naming its entry in `hosts` (an IP
/// address or a DNS name; empty for none).
pub fn write_set(dir: &Path, nodes: u64, hosts: &[String]) -> Result<ClusterCerts, CertError> {
    let certs = ClusterCerts {
        dir: dir.to_owned(),
    };
    let complete = (1..=nodes)
        .flat_map(|id| {
            let files = certs.node(id);
            [files.ca, files.cert, files.key]
        })
        .chain([certs.client().cert, certs.client().key])
        .all(|path| path.exists());
    if complete {
        return Ok(certs);
    }
    std::fs::create_dir_all(&certs.dir).map_err(|e| CertError::io(&certs.dir, e))?;

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "leasehold cluster CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    write(&certs.path("ca.pem"), &ca_cert.pem(), false)?;

    let issue = |names: Vec<SanType>, common_name: &str| -> Result<(String, String), CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = names;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    for id in 1..=nodes {
        // The node's own name, for its peers; the local host's names, for clients.
        let mut names = vec![
            SanType::DnsName(node_name(id).try_into()?),
            SanType::DnsName("localhost".try_into()?),
            SanType::IpAddress([127, 0, 0, 1].into()),
        ];
        match hosts.get(id as usize - 1).map(String::as_str) {
            None | Some("") => {}
            Some(host) => names.push(match host.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(host.try_into().map_err(|e| CertError::Host {
                    host: host.to_owned(),
                    why: e,
                })?),
            }),
        }
        let (cert, key) = issue(names, &node_name(id))?;
        let files = certs.node(id);
        write(&files.cert, &cert, false)?;
        write(&files.key, &key, true)?;
    }
    let (cert, key) = issue(vec![SanType::DnsName(CLIENT_NAME.try_into()?)], CLIENT_NAME)?;
    write(&certs.client().cert, &cert, false)?;
    write(&certs.client().key, &key, true)?;
    Ok(certs)
}

/// Writes `text` to `path`; a private key readable by its owner only.
fn write(path: &Path, text: &str, private: bool) -> Result<(), CertError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if private {
        options.mode(0o600);
    }
    let written = options.open(path).and_then(|mut file| {
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        file.sync_all()
    });
    written.map_err(|e| CertError::io(path, e))
}
