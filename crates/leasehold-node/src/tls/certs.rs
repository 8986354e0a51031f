//! Certificates for `cluster --tls` and `leasehold certs`: a CA, one certificate per node, one
//! for ordinary clients (`leasehold-client`) and one for the first admin (`admin`), kept in the
//! cluster's dir and reused when it resumes. The CA's key is kept beside them, readable by its
//! owner only, so that `leasehold certs --client NAME` can issue a certificate for each team or
//! service later: a client's identity is the name its certificate carries. For a real
//! deployment, issue them from your own CA instead (the README's Security section says what
//! each must name).

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
    /// A name no client certificate may carry.
    #[error("{name:?} cannot name a client certificate: {why}")]
    Refused {
        /// The name, as given.
        name: String,
        /// Why.
        why: String,
    },
    /// A set made without its CA's key (by an earlier version) cannot issue more.
    #[error(
        "{0} is missing: this set was made without keeping its CA's key, so it cannot issue \
         more certificates; make a new set in an empty dir"
    )]
    NoCaKey(PathBuf),
    /// A certificate name that is not a DNS name (letters, digits, `-` and `.`).
    #[error("{name:?} cannot name a certificate: {why}")]
    Name {
        /// The name, as given.
        name: String,
        /// Why rcgen refused it.
        why: rcgen::Error,
    },
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
/// The name on the ordinary client certificate: any name that is no member's.
pub const CLIENT_NAME: &str = "leasehold-client";
/// The name on the first admin's certificate (`serve --auth-admin admin`).
pub const ADMIN_NAME: &str = "admin";

/// The files of a cluster's certificates.
pub struct ClusterCerts {
    dir: PathBuf,
}

impl ClusterCerts {
    /// The set in `dir`, as `write_set` made it.
    pub fn open(dir: &Path) -> ClusterCerts {
        ClusterCerts {
            dir: dir.to_owned(),
        }
    }

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

    /// What an ordinary client shows.
    pub fn client(&self) -> TlsFiles {
        TlsFiles {
            ca: self.path("ca.pem"),
            cert: self.path("client.pem"),
            key: self.path("client-key.pem"),
        }
    }

    /// What the first admin shows; `None` for a set made before there was one.
    pub fn admin(&self) -> Option<TlsFiles> {
        let files = self.identity(ADMIN_NAME);
        (files.cert.exists() && files.key.exists()).then_some(files)
    }

    /// Where the certificate for identity `name` is, once issued (`name.pem`).
    pub fn identity(&self, name: &str) -> TlsFiles {
        TlsFiles {
            ca: self.path("ca.pem"),
            cert: self.path(&format!("{name}.pem")),
            key: self.path(&format!("{name}-key.pem")),
        }
    }

    fn ca_key(&self) -> PathBuf {
        self.path("ca-key.pem")
    }

    /// Issues a client certificate naming `name` (its identity) from this set's CA, written
    /// as `name.pem` and `name-key.pem`, replacing one there.
    pub fn issue_client(&self, name: &str) -> Result<TlsFiles, CertError> {
        client_name(name)?;
        let issuer = self.issuer()?;
        let dns = name.try_into().map_err(|why| CertError::Name {
            name: name.to_owned(),
            why,
        })?;
        let files = self.identity(name);
        issue_to(&files, &issuer, vec![SanType::DnsName(dns)], name)?;
        Ok(files)
    }
}

impl ClusterCerts {
    /// Renews node `id`'s certificate: a new key and certificate from this set's CA, naming
    /// `host` too if given, written over the node's (which a running node then loads; see
    /// `tls::reload`).
    pub fn issue_node(&self, id: u64, host: Option<&str>) -> Result<TlsFiles, CertError> {
        let files = self.node(id);
        issue_to(
            &files,
            &self.issuer()?,
            node_names(id, host)?,
            &node_name(id),
        )?;
        Ok(files)
    }

    /// The CA, from its kept key.
    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, CertError> {
        let key_path = self.ca_key();
        let pem = std::fs::read_to_string(&key_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CertError::NoCaKey(key_path.clone()),
            _ => CertError::io(&key_path, e),
        })?;
        Ok(Issuer::new(ca_params()?, KeyPair::from_pem(&pem)?))
    }
}

/// What node `id`'s certificate names: the node, for its peers; the local host's names and
/// `host` (an IP address or a DNS name), for clients.
fn node_names(id: u64, host: Option<&str>) -> Result<Vec<SanType>, CertError> {
    let mut names = vec![
        SanType::DnsName(node_name(id).try_into()?),
        SanType::DnsName("localhost".try_into()?),
        SanType::IpAddress([127, 0, 0, 1].into()),
    ];
    match host {
        None | Some("") => {}
        Some(host) => names.push(match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.try_into().map_err(|e| CertError::Host {
                host: host.to_owned(),
                why: e,
            })?),
        }),
    }
    Ok(names)
}

/// Whether `name` may name a client certificate: an identity (a DNS name: letters, digits,
/// `-` and `.`) that is no member's (`leasehold-node-N`, which the peer plane admits), whose
/// files (`name.pem`, `name-key.pem`) are not the set's own (the CA's, a node's, the ordinary
/// client's).
fn client_name(name: &str) -> Result<(), CertError> {
    let refused = |why: &str| {
        Err(CertError::Refused {
            name: name.to_owned(),
            why: why.to_owned(),
        })
    };
    if let Err(invalid) = leasehold_core::limits::identity_field(name) {
        return refused(&invalid.problem);
    }
    if name.starts_with('.') {
        return refused("a file name starting with '.' would be hidden");
    }
    let taken = name == "ca" || name == "client" || name == CLIENT_NAME;
    if taken
        || ["ca-", "node-", "client-", "leasehold-node-"]
            .iter()
            .any(|p| name.starts_with(p))
    {
        return refused("the set's own certificates (the CA's, the nodes', the client's) use it");
    }
    Ok(())
}

/// The CA's parameters: the same every time, so that an issuer rebuilt from them and the kept
/// key signs certificates that chain to the CA certificate made from them.
fn ca_params() -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "leasehold cluster CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

/// Makes a key and a certificate for `names` (common name `common_name`), signed by `issuer`,
/// and writes them to `files`.
fn issue_to(
    files: &TlsFiles,
    issuer: &Issuer<'_, KeyPair>,
    names: Vec<SanType>,
    common_name: &str,
) -> Result<(), CertError> {
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
    let cert = params.signed_by(&key, issuer)?;
    write(&files.cert, &cert.pem(), false)?;
    write(&files.key, &key.serialize_pem(), true)
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
        // A set from before the admin certificate: one is issued if its CA's key was kept.
        if certs.admin().is_none() && certs.ca_key().exists() {
            certs.issue_client(ADMIN_NAME)?;
        }
        return Ok(certs);
    }
    std::fs::create_dir_all(&certs.dir).map_err(|e| CertError::io(&certs.dir, e))?;

    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params()?.self_signed(&ca_key)?;
    write(&certs.ca_key(), &ca_key.serialize_pem(), true)?;
    write(&certs.path("ca.pem"), &ca_cert.pem(), false)?;
    let issuer = Issuer::new(ca_params()?, ca_key);

    for id in 1..=nodes {
        let names = node_names(id, hosts.get(id as usize - 1).map(String::as_str))?;
        issue_to(&certs.node(id), &issuer, names, &node_name(id))?;
    }
    let client = vec![SanType::DnsName(CLIENT_NAME.try_into()?)];
    issue_to(&certs.client(), &issuer, client, CLIENT_NAME)?;
    let admin = vec![SanType::DnsName(ADMIN_NAME.try_into()?)];
    issue_to(&certs.identity(ADMIN_NAME), &issuer, admin, ADMIN_NAME)?;
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
