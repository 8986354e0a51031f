//! `leasehold auth ...`: who may do what. Each change goes through the log, so every node
//! enforces it from the same log index on, with no restart.

use super::printed::{json, print};
use super::printed::{Binding, Policy, PolicyChanged, Token, TokenAdded, WhoAmI};

use super::{ClientOpts, Exit, Output};
use crate::proto::v1 as pb;
use leasehold_client::LeaseClient;
use pb::change_policy_request::Change;

#[derive(clap::Subcommand)]
pub enum AuthCmd {
    /// Turn authorization on, with ADMIN (a client certificate's name) an admin. From then on
    /// a client with neither a certificate nor a bearer token may do nothing, and others what
    /// their roles grant. Needs every node serving TLS.
    Enable {
        #[arg(long, value_name = "ADMIN")]
        admin: String,
    },
    /// Turn authorization off: every client may do everything. Roles and bindings are kept.
    Disable,
    /// Create or change roles.
    #[command(subcommand)]
    Role(RoleCmd),
    /// Give IDENTITY (a client certificate's name) ROLE.
    Bind { identity: String, role: String },
    /// Take ROLE from IDENTITY. The last admin cannot be unbound.
    Unbind { identity: String, role: String },
    /// Bearer tokens, for clients that cannot show a certificate.
    #[command(subcommand)]
    Token(TokenCmd),
    /// The roles, their grants and who is bound to them (admin only).
    Show,
    /// The identity this client's certificate gives it, and its roles.
    Whoami,
}

#[derive(clap::Subcommand)]
pub enum RoleCmd {
    /// Create role NAME, or replace its grants, each PERMISSION:PREFIX: read-leases, hold,
    /// check (lease names), read-keys, write, delete (keys). An empty prefix covers every
    /// name: `hold:` holds any lease, `write:jobs/` writes keys under jobs/. An identity holds
    /// leases only as itself or as holders under IDENTITY/.
    Put {
        name: String,
        #[arg(value_name = "PERMISSION:PREFIX", required = true, value_parser = parse_grant)]
        grants: Vec<pb::Grant>,
    },
    /// Delete role NAME, and every binding to it.
    Delete { name: String },
}

#[derive(clap::Subcommand)]
pub enum TokenCmd {
    /// Make a bearer token for IDENTITY and print it, once: the store keeps only its
    /// SHA-256. A client sends it with LEASEHOLD_BEARER_TOKEN (or --bearer-token), over TLS.
    Add { identity: String },
    /// Revoke every bearer token of IDENTITY.
    Revoke { identity: String },
}

/// Every permission but admin, on every name under `prefix`: what `cluster --tls` gives the
/// ordinary client certificate.
pub fn every_permission_but_admin(prefix: &str) -> Vec<pb::Grant> {
    crate::lease::auth::Permission::ALL
        .into_iter()
        .filter(|p| *p != crate::lease::auth::Permission::Admin)
        .map(|p| pb::Grant {
            permission: p.name().to_owned(),
            prefix: prefix.to_owned(),
        })
        .collect()
}

/// Creates (or replaces) `role` with `grants` and binds `identity` to it, as `client` (an
/// admin, once authorization is on); answers where the binding was applied.
pub async fn give_role(
    client: &LeaseClient,
    identity: &str,
    role: &str,
    grants: Vec<pb::Grant>,
) -> Result<leasehold_client::Applied, leasehold_client::ClientError> {
    let role_def = pb::AuthRole {
        name: role.to_owned(),
        grants,
    };
    client.change_policy(Change::PutRole(role_def)).await?;
    let binding = pb::Binding {
        identity: identity.to_owned(),
        role: role.to_owned(),
    };
    client.change_policy(Change::Bind(binding)).await
}

/// `permission:prefix`; the permission is checked by the node, which names the ones it knows.
fn parse_grant(text: &str) -> Result<pb::Grant, String> {
    let (permission, prefix) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not PERMISSION:PREFIX (for example hold:jobs/)"))?;
    Ok(pb::Grant {
        permission: permission.to_owned(),
        prefix: prefix.to_owned(),
    })
}

pub async fn run(opts: &ClientOpts, command: AuthCmd) -> anyhow::Result<Exit> {
    let client = opts.one_shot_client()?;
    let binding = |identity, role| pb::Binding { identity, role };
    let change = match command {
        AuthCmd::Show => {
            print_policy(opts.output, &client.policy().await?);
            return Ok(Exit::Ok);
        }
        AuthCmd::Whoami => {
            let me = client.who_am_i().await?;
            let printed = WhoAmI {
                identity: &me.identity,
                auth_enabled: me.auth_enabled,
                roles: &me.roles,
            };
            print(opts.output, &printed, || {
                format!(
                    "{} (authorization {}; roles: {})",
                    if me.identity.is_empty() {
                        "no identity: no client certificate"
                    } else {
                        &me.identity
                    },
                    if me.auth_enabled { "on" } else { "off" },
                    if me.roles.is_empty() {
                        "none".to_owned()
                    } else {
                        me.roles.join(", ")
                    }
                )
            });
            return Ok(Exit::Ok);
        }
        AuthCmd::Token(TokenCmd::Add { identity }) => {
            let token = crate::tls::bearer::new_token();
            let sha256 = crate::tls::bearer::sha256(&token);
            let applied = client
                .change_policy(Change::AddToken(pb::BearerToken { identity, sha256 }))
                .await?;
            let added = TokenAdded {
                token: &token,
                log_index: applied.log_index,
            };
            print(opts.output, &added, || token.clone());
            return Ok(Exit::Ok);
        }
        AuthCmd::Token(TokenCmd::Revoke { identity }) => Change::RevokeTokens(identity),
        AuthCmd::Enable { admin } => Change::Enable(admin),
        AuthCmd::Disable => Change::Disable(true),
        AuthCmd::Role(RoleCmd::Put { name, grants }) => {
            Change::PutRole(pb::AuthRole { name, grants })
        }
        AuthCmd::Role(RoleCmd::Delete { name }) => Change::DeleteRole(name),
        AuthCmd::Bind { identity, role } => Change::Bind(binding(identity, role)),
        AuthCmd::Unbind { identity, role } => Change::Unbind(binding(identity, role)),
    };
    let applied = client.change_policy(change).await?;
    let log_index = applied.log_index;
    print(opts.output, &PolicyChanged { log_index }, || {
        format!("policy changed at log index {log_index}")
    });
    Ok(Exit::Ok)
}

fn print_policy(output: Output, p: &pb::PolicyResponse) {
    let grants = |role: &pb::AuthRole| -> Vec<String> {
        role.grants
            .iter()
            .map(|g| format!("{}:{}", g.permission, g.prefix))
            .collect()
    };
    match output {
        Output::Json => {
            let policy = Policy {
                enabled: p.enabled,
                roles: p
                    .roles
                    .iter()
                    .map(|r| (r.name.as_str(), grants(r)))
                    .collect(),
                bindings: (p.bindings.iter())
                    .map(|b| Binding {
                        identity: &b.identity,
                        role: &b.role,
                    })
                    .collect(),
                tokens: (p.tokens.iter())
                    .map(|t| Token {
                        identity: &t.identity,
                        sha256_prefix: &t.sha256,
                    })
                    .collect(),
            };
            println!("{}", json(&policy));
        }
        Output::Text => {
            println!("authorization {}", if p.enabled { "on" } else { "off" });
            for role in &p.roles {
                println!("role {}: {}", role.name, grants(role).join(" "));
            }
            for b in &p.bindings {
                println!("{} is bound to {}", b.identity, b.role);
            }
            for t in &p.tokens {
                println!("{} has bearer token {}...", t.identity, t.sha256);
            }
        }
    }
}
