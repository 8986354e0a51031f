//! `leasehold member add|remove|list`: who is in the cluster, changed on the leader.

use leasehold_client::Members;
use serde_json::json;

use super::{ClientOpts, Exit, Output};

#[derive(clap::Subcommand)]
pub enum MemberCmd {
    /// Add node ID, started with `serve --join`: as a learner until it has caught up with the
    /// log, then as a voter. Use a new id for a new disk: a node whose data dir was lost cannot
    /// come back under its old id.
    Add {
        id: u64,
        /// Where the other nodes reach it (its --peer-listen).
        #[arg(long)]
        peer: String,
        /// Where clients reach it (its --advertise, or --listen): checked against what it
        /// gives out.
        #[arg(long)]
        client: String,
    },
    /// Remove node ID, voter or learner.
    Remove { id: u64 },
    /// The members: id, role, peer and client address, and how far each log has come.
    List,
}

pub async fn run(opts: &ClientOpts, command: MemberCmd) -> anyhow::Result<Exit> {
    let client = opts.client()?;
    let members = match command {
        MemberCmd::Add {
            id,
            peer,
            client: address,
        } => client.add_member(id, &peer, &address).await?,
        MemberCmd::Remove { id } => client.remove_member(id).await?,
        MemberCmd::List => client.members().await?,
    };
    print(opts.output, &members);
    Ok(Exit::Ok)
}

fn print(output: Output, m: &Members) {
    match output {
        Output::Json => {
            let list: Vec<_> = m
                .members
                .iter()
                .map(|m| {
                    json!({
                        "id": m.id, "role": m.role.as_str(), "peer": m.peer_address,
                        "client": m.client_address, "match_index": m.match_index,
                    })
                })
                .collect();
            println!("{}", json!(list));
        }
        Output::Text => {
            println!(
                "{:<4} {:<8} {:<22} {:<22} {:>11}",
                "ID", "ROLE", "PEER", "CLIENT", "MATCH INDEX"
            );
            for member in &m.members {
                let client = if member.client_address.is_empty() {
                    "(unreachable)"
                } else {
                    &member.client_address
                };
                println!(
                    "{:<4} {:<8} {:<22} {:<22} {:>11}",
                    member.id,
                    member.role.as_str(),
                    member.peer_address,
                    client,
                    member.match_index
                );
            }
        }
    }
}
