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

use crate::tls::{node_name, TlsFiles};

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

#[derive(clap::Args)]
pub struct CertsArgs {
    /// Where to write them (ca.pem, node-N.pem and node-N-key.pem, client.pem and
    /// client-key.pem); an existing complete set there is kept.
    #[arg(long)]
    dir: PathBuf,
    /// How many nodes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=5))]
    nodes: u64,
    /// The host (IP address or DNS name) clients dial each node at, as ID=HOST, comma
    /// separated; each node's certificate names it beside leasehold-node-ID.
    #[arg(long, value_name = "ID=HOST,...", value_parser = parse_hosts, default_value = "")]
    hosts: std::collections::BTreeMap<u64, String>,
}

fn parse_hosts(text: &str) -> Result<std::collections::BTreeMap<u64, String>, String> {
    let mut hosts = std::collections::BTreeMap::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (id, host) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not ID=HOST"))?;
        let id = id
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{id:?} in {part:?} is not a node id"))?;
        hosts.insert(id, host.trim().to_owned());
    }
    Ok(hosts)
}

pub fn run(args: CertsArgs) -> anyhow::Result<super::Exit> {
    if let Some(id) = args.hosts.keys().find(|id| **id == 0 || **id > args.nodes) {
        anyhow::bail!("--hosts names node {id}; the nodes are 1 to {}", args.nodes);
    }
    let hosts: Vec<String> = (1..=args.nodes)
        .map(|id| args.hosts.get(&id).cloned().unwrap_or_default())
        .collect();
    let certs = write_set(&args.dir, args.nodes, &hosts)?;
    for id in 1..=args.nodes {
        let files = certs.node(id);
        println!(
            "node {id}: serve --tls-ca {} --tls-cert {} --tls-key {}",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        );
    }
    let client = certs.client();
    println!(
        "clients: export LEASEHOLD_TLS_CA={} LEASEHOLD_TLS_CERT={} LEASEHOLD_TLS_KEY={}",
        client.ca.display(),
        client.cert.display(),
        client.key.display()
    );
    Ok(super::Exit::Ok)
}

/// The certificates under `dir`/tls for nodes 1 to `nodes`: made now if there are none yet.
pub fn ensure(dir: &Path, nodes: u64) -> anyhow::Result<ClusterCerts> {
    write_set(&dir.join(SUBDIR), nodes, &[])
}

/// [`ensure`], each node's certificate also naming its entry in `node_ips` (node 1 the first),
/// for clients that dial nodes on addresses other than 127.0.0.1.
pub fn ensure_for(dir: &Path, nodes: u64, node_ips: &[IpAddr]) -> anyhow::Result<ClusterCerts> {
    let hosts: Vec<String> = node_ips.iter().map(IpAddr::to_string).collect();
    write_set(&dir.join(SUBDIR), nodes, &hosts)
}

/// The set in `dir` itself, each node's certificate also naming its entry in `hosts` (an IP
/// address or a DNS name; empty for none).
fn write_set(dir: &Path, nodes: u64, hosts: &[String]) -> anyhow::Result<ClusterCerts> {
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
    std::fs::create_dir_all(&certs.dir)?;

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

    let issue = |names: Vec<SanType>, common_name: &str| -> anyhow::Result<(String, String)> {
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
                Err(_) => SanType::DnsName(host.try_into().map_err(|e| {
                    anyhow::anyhow!("{host:?} is neither an IP address nor a DNS name: {e}")
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
fn write(path: &Path, text: &str, private: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if private {
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    file.sync_all()?;
    Ok(())
}
