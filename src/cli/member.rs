//! `leasehold member add|remove|list`: who is in the cluster, changed on the leader.

use super::printed::json;
use super::printed::{lines, table};
use leasehold_client::Members;

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
    let client = opts.one_shot_client()?;
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
        Output::Json => println!("{}", json(&m.members)),
        Output::Text => {
            let header = ["ID", "ROLE", "PEER", "CLIENT", "MATCH INDEX"];
            let mut rows = table(&header, &[4], &[]);
            for member in &m.members {
                let client = match member.client_address.is_empty() {
                    true => "(unreachable)".to_owned(),
                    false => member.client_address.clone(),
                };
                rows.add_row(vec![
                    member.id.to_string(),
                    member.role.as_str().to_owned(),
                    member.peer_address.clone(),
                    client,
                    member.match_index.to_string(),
                ]);
            }
            for line in lines(&rows) {
                println!("{line}");
            }
        }
    }
}
