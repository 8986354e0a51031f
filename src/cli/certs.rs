//! `leasehold certs`: a CA, one certificate per node and one for clients, written where the
//! operator says (see `leasehold_node::tls::certs`, which `cluster --tls` uses too).

use std::path::PathBuf;

use crate::tls::certs::{write_set, ClusterCerts, ADMIN_NAME, CLIENT_NAME};

/// `leasehold certs`' flags.
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
    /// Instead, issue a client certificate naming NAME (its identity for `leasehold auth`)
    /// from the set already in --dir, as NAME.pem and NAME-key.pem.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["nodes", "hosts"])]
    client: Option<String>,
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

/// Writes the set, or keeps a complete one already there, and says where.
pub fn run(args: CertsArgs) -> anyhow::Result<super::Exit> {
    if let Some(name) = &args.client {
        let files = ClusterCerts::open(&args.dir).issue_client(name)?;
        print_client(name, &files);
        return Ok(super::Exit::Ok);
    }
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
    print_client(CLIENT_NAME, &certs.client());
    if let Some(admin) = certs.admin() {
        print_client(ADMIN_NAME, &admin);
    }
    Ok(super::Exit::Ok)
}

fn print_client(name: &str, files: &crate::tls::TlsFiles) {
    println!(
        "{name}: export LEASEHOLD_TLS_CA={} LEASEHOLD_TLS_CERT={} LEASEHOLD_TLS_KEY={}",
        files.ca.display(),
        files.cert.display(),
        files.key.display()
    );
}
