//! Who may do what. A role grants permissions on lease-name prefixes (read, hold, check) and
//! key prefixes (read, write, delete), or the admin permission (membership, snapshots, the
//! manual clock, the policy itself); identities, the names client certificates carry, are bound
//! to roles. An identity holds leases only as holders it owns: its own name, or names under
//! `identity/`, so knowing another holder's token is not enough to release its lease.
//!
//! Pure, like the table: a [`Policy`] changes only by an [`AuthChange`], and answers
//! [`Policy::check`] from its own state alone, so replicas that applied the same changes decide
//! every request the same way. Off, the policy allows everything: a cluster without TLS has no
//! identities to tell apart.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::limits::{
    identity_field, name, sha256_field, MAX_BOUND_IDENTITIES, MAX_GRANTS_PER_ROLE, MAX_ROLES,
    MAX_ROLES_PER_IDENTITY, MAX_TOKENS,
};
use crate::{InvalidInput, Limits};

/// The role every policy has, granting everything; the first admin is bound to it.
pub const ADMIN_ROLE: &str = "admin";

/// What a grant allows, on the names its prefix covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Permission {
    /// See leases: their holder and token (`GetLease`, `Watch`).
    ReadLeases,
    /// Acquire, renew and release leases, as holders the identity owns.
    Hold,
    /// Ask whether a token is current (`CheckToken`).
    Check,
    /// Read rows (`Get`).
    ReadKeys,
    /// Write rows, plain and fenced.
    Write,
    /// Delete rows.
    Delete,
    /// Membership, snapshot save and restore, the manual clock and the policy. Its prefix is
    /// ignored.
    Admin,
}

impl Permission {
    /// Every permission, in the order the policy lists them.
    pub const ALL: [Permission; 7] = [
        Permission::ReadLeases,
        Permission::Hold,
        Permission::Check,
        Permission::ReadKeys,
        Permission::Write,
        Permission::Delete,
        Permission::Admin,
    ];

    /// The permission's name in a grant (`hold:jobs/`).
    pub fn name(self) -> &'static str {
        match self {
            Permission::ReadLeases => "read-leases",
            Permission::Hold => "hold",
            Permission::Check => "check",
            Permission::ReadKeys => "read-keys",
            Permission::Write => "write",
            Permission::Delete => "delete",
            Permission::Admin => "admin",
        }
    }

    /// The permission a name in a grant stands for.
    pub fn parse(text: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.name() == text)
    }
}

/// One permission on every name that starts with `prefix` (every name, for an empty prefix).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Grant {
    /// What it allows.
    pub permission: Permission,
    /// On which lease names or keys.
    pub prefix: String,
}

impl Grant {
    fn covers(&self, permission: Permission, resource: &str) -> bool {
        self.permission == permission
            && (permission == Permission::Admin || resource.starts_with(&self.prefix))
    }
}

/// What a request asks to do, and to what: the [`Policy`] allows it or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// See a lease.
    ReadLease(&'a str),
    /// Acquire, renew or release `lease` as `holder`.
    Hold {
        /// The lease.
        lease: &'a str,
        /// The holder it acts as.
        holder: &'a str,
    },
    /// Check a token of a lease.
    Check(&'a str),
    /// Read a row.
    ReadKey(&'a str),
    /// Write a row.
    Write(&'a str),
    /// Delete a row.
    Delete(&'a str),
    /// An admin call, named for the refusal (`remove a member`).
    Admin(&'static str),
}

impl Action<'_> {
    fn needs(&self) -> (Permission, &str) {
        match *self {
            Action::ReadLease(lease) => (Permission::ReadLeases, lease),
            Action::Hold { lease, .. } => (Permission::Hold, lease),
            Action::Check(lease) => (Permission::Check, lease),
            Action::ReadKey(key) => (Permission::ReadKeys, key),
            Action::Write(key) => (Permission::Write, key),
            Action::Delete(key) => (Permission::Delete, key),
            Action::Admin(what) => (Permission::Admin, what),
        }
    }
}

/// A refusal: who asked, what for, and on what. Kept with a session's answers, so serialized.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{identity} may not {action}{on}{why}", on = on(resource), why = why(reason))]
pub struct Denied {
    /// The identity that asked (`anonymous` without a certificate).
    pub identity: String,
    /// What it asked to do.
    pub action: String,
    /// On what: the lease name or key; empty for an admin call.
    pub resource: String,
    /// Why, when the roles are not the reason.
    pub reason: Option<String>,
}

impl Denied {
    /// The refusal of `action` to `identity` (`None`: no identity), for `reason` if the roles
    /// are not it.
    fn of(identity: Option<&str>, action: &Action, reason: Option<String>) -> Denied {
        let (_, resource) = action.needs();
        Denied {
            identity: identity.unwrap_or("anonymous").to_owned(),
            action: verb(action).to_owned(),
            resource: match action {
                Action::Admin(_) => String::new(),
                _ => resource.to_owned(),
            },
            reason,
        }
    }

    /// The refusal of a request under a session that another identity opened (`asker` `None`:
    /// one without an identity).
    pub fn foreign_session(asker: Option<&str>, client: u64) -> Denied {
        Denied {
            identity: asker.unwrap_or("anonymous").to_owned(),
            action: "use session".to_owned(),
            resource: client.to_string(),
            reason: Some("another identity opened it; open a session of your own".into()),
        }
    }
}

fn on(resource: &str) -> String {
    match resource {
        "" => String::new(),
        _ => format!(" {resource:?}"),
    }
}

fn why(reason: &Option<String>) -> String {
    reason
        .as_ref()
        .map_or_else(String::new, |reason| format!(": {reason}"))
}

/// A named set of grants.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    /// What it allows.
    pub grants: BTreeSet<Grant>,
}

/// A change to the policy, as the log carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthChange {
    /// Turns authorization on, binding `admin` to the admin role.
    Enable {
        /// The first admin's identity.
        admin: String,
    },
    /// Turns it off: every identity may do everything again. The roles and bindings stay.
    Disable,
    /// Creates role `name`, or replaces its grants.
    PutRole {
        /// The role.
        name: String,
        /// Its grants, replacing any it had.
        grants: Vec<Grant>,
    },
    /// Deletes role `name` and every binding to it.
    DeleteRole {
        /// The role.
        name: String,
    },
    /// Binds `identity` to `role`.
    Bind {
        /// The identity.
        identity: String,
        /// The role.
        role: String,
    },
    /// Unbinds `identity` from `role`.
    Unbind {
        /// The identity.
        identity: String,
        /// The role.
        role: String,
    },
    /// A bearer token for `identity`, for clients that cannot show a certificate: the policy
    /// keeps its SHA-256 alone, so neither the log nor a snapshot holds the token.
    AddToken {
        /// Whose token it is.
        identity: String,
        /// The token's SHA-256, in lowercase hex.
        sha256: String,
    },
    /// Revokes every bearer token of `identity`.
    RevokeTokens {
        /// Whose tokens.
        identity: String,
    },
}

impl AuthChange {
    /// Checks the change's own fields (names, grants, the admin role's fixed shape), as at the
    /// edge; what depends on the policy it meets is checked when it is applied.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        match self {
            AuthChange::Enable { admin } => identity_field(admin),
            AuthChange::Disable => Ok(()),
            AuthChange::PutRole { name: role, grants } => {
                role_field(role)?;
                if role == ADMIN_ROLE {
                    return Err(InvalidInput::new(
                        "role",
                        "the admin role's grants are fixed",
                    ));
                }
                grants_field(grants)
            }
            AuthChange::DeleteRole { name: role } => {
                role_field(role)?;
                if role == ADMIN_ROLE {
                    return Err(InvalidInput::new(
                        "role",
                        "the admin role cannot be deleted",
                    ));
                }
                Ok(())
            }
            AuthChange::Bind { identity, role } | AuthChange::Unbind { identity, role } => {
                identity_field(identity)?;
                role_field(role)
            }
            AuthChange::AddToken { identity, sha256 } => {
                identity_field(identity)?;
                sha256_field(sha256)
            }
            AuthChange::RevokeTokens { identity } => identity_field(identity),
        }
    }
}

/// Roles, the identities bound to them, and whether any of it is enforced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    enabled: bool,
    /// Whether it was ever turned on: a cluster created with an admin turns it on once, and
    /// never again after an admin turned it off.
    was_enabled: bool,
    roles: BTreeMap<String, Role>,
    bindings: BTreeMap<String, BTreeSet<String>>,
    /// Each bearer token's SHA-256 (lowercase hex), and whose it is.
    tokens: BTreeMap<String, String>,
}

impl Default for Policy {
    fn default() -> Self {
        let admin = Role {
            grants: [Grant {
                permission: Permission::Admin,
                prefix: String::new(),
            }]
            .into(),
        };
        Policy {
            enabled: false,
            was_enabled: false,
            roles: [(ADMIN_ROLE.to_owned(), admin)].into(),
            bindings: BTreeMap::new(),
            tokens: BTreeMap::new(),
        }
    }
}

impl Policy {
    /// Whether the policy is enforced.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether it was ever turned on.
    pub fn was_enabled(&self) -> bool {
        self.was_enabled
    }

    /// The roles, by name.
    pub fn roles(&self) -> &BTreeMap<String, Role> {
        &self.roles
    }

    /// Whose bearer token has this SHA-256 (lowercase hex), if any's.
    pub fn token_identity(&self, sha256: &str) -> Option<&str> {
        self.tokens.get(sha256).map(String::as_str)
    }

    /// Each bearer token's SHA-256 and whose it is.
    pub fn tokens(&self) -> &BTreeMap<String, String> {
        &self.tokens
    }

    /// Each bound identity's roles.
    pub fn bindings(&self) -> &BTreeMap<String, BTreeSet<String>> {
        &self.bindings
    }

    /// [`check`](Self::check) for an identity a bearer token (its SHA-256 `bearer`) gave, if
    /// one did: refused once the token no longer gives it, revoked since the node that took the
    /// request looked it up.
    pub fn check_caller(
        &self,
        identity: Option<&str>,
        bearer: Option<&str>,
        action: &Action,
    ) -> Result<(), Denied> {
        if self.enabled && !self.token_still_gives(bearer, identity) {
            let reason = "its bearer token was revoked";
            return Err(Denied::of(identity, action, Some(reason.into())));
        }
        self.check(identity, action)
    }

    /// Whether the bearer token with SHA-256 `bearer`, if a token gave the identity, gives it
    /// still.
    fn token_still_gives(&self, bearer: Option<&str>, identity: Option<&str>) -> bool {
        bearer.is_none_or(|sha256| self.token_identity(sha256) == identity)
    }

    /// Whether `identity` is bound to the admin role.
    fn is_admin(&self, identity: &str) -> bool {
        self.bindings
            .get(identity)
            .is_some_and(|roles| roles.contains(ADMIN_ROLE))
    }

    /// Whether `identity` may make `change` while the policy is off (on, [`check`](Self::check)
    /// decides, as for any admin call). Never turned on, only turning it on is allowed, so that
    /// no one plants a role, a binding or a token before it; turned off since, only an admin
    /// changes it, as when it was on.
    pub fn check_change(
        &self,
        identity: Option<&str>,
        bearer: Option<&str>,
        change: &AuthChange,
    ) -> Result<(), Denied> {
        if self.enabled {
            return Ok(());
        }
        let action = Action::Admin("change the policy");
        let admin = identity.is_some_and(|identity| self.is_admin(identity));
        let token_holds = self.token_still_gives(bearer, identity);
        match (self.was_enabled, change) {
            (false, AuthChange::Enable { .. }) => Ok(()),
            (false, _) => Err(Denied::of(
                identity,
                &action,
                Some("authorization was never on: turn it on first, naming its admin".into()),
            )),
            (true, _) if admin && token_holds => Ok(()),
            (true, _) => Err(Denied::of(
                identity,
                &action,
                Some("authorization is off, and only an admin changes the policy".into()),
            )),
        }
    }

    /// Where `identity` (given by the bearer token with SHA-256 `bearer`, if one did) may do
    /// `permission`: its grants' prefixes, or `None` for everywhere (the policy off, or an
    /// admin reading). What a listing reads, so that it reads no name the caller may not.
    pub fn prefixes(
        &self,
        identity: Option<&str>,
        bearer: Option<&str>,
        permission: Permission,
    ) -> Option<Vec<String>> {
        if !self.enabled {
            return None;
        }
        let Some(identity) = identity.filter(|_| self.token_still_gives(bearer, identity)) else {
            return Some(Vec::new());
        };
        let reads = matches!(permission, Permission::ReadLeases | Permission::ReadKeys);
        if reads && self.is_admin(identity) {
            return None;
        }
        let roles = self.bindings.get(identity).into_iter().flatten();
        let grants = roles
            .filter_map(|role| self.roles.get(role))
            .flat_map(|r| &r.grants);
        let prefixes = grants.filter(|g| g.permission == permission);
        Some(prefixes.map(|g| g.prefix.clone()).collect())
    }

    /// Whether `identity` (`None`: a client without a certificate) may do `action`. An admin
    /// may do every admin call and read everything; holding stays bound to owned holders.
    pub fn check(&self, identity: Option<&str>, action: &Action) -> Result<(), Denied> {
        if !self.enabled {
            return Ok(());
        }
        let (permission, resource) = action.needs();
        let denied = |reason: Option<String>| Denied::of(identity, action, reason);
        let Some(identity) = identity else {
            return Err(denied(Some(
                "authorization is on, and a client without a certificate has no identity".into(),
            )));
        };
        if let Action::Hold { holder, .. } = action {
            if !owns(identity, holder) {
                return Err(denied(Some(format!(
                    "an identity holds only as itself or as holders under \"{identity}/\", not \
                     as {holder:?}"
                ))));
            }
        }
        let grants = self
            .bindings
            .get(identity)
            .into_iter()
            .flatten()
            .filter_map(|role| self.roles.get(role))
            .flat_map(|role| &role.grants);
        let mut allowed = false;
        for grant in grants {
            allowed |= grant.covers(permission, resource)
                || (grant.permission == Permission::Admin
                    && matches!(
                        permission,
                        Permission::ReadLeases | Permission::ReadKeys | Permission::Check
                    ));
        }
        match allowed {
            true => Ok(()),
            false => Err(denied(None)),
        }
    }

    /// Applies `change`, or says why it would leave the policy invalid or the cluster without
    /// an admin; a refused change changes nothing.
    pub fn apply(&mut self, change: &AuthChange) -> Result<(), InvalidInput> {
        change.validate()?;
        match change {
            AuthChange::Enable { admin } => {
                self.bindings
                    .entry(admin.clone())
                    .or_default()
                    .insert(ADMIN_ROLE.to_owned());
                self.enabled = true;
                self.was_enabled = true;
            }
            AuthChange::Disable => self.enabled = false,
            AuthChange::PutRole { name: role, grants } => {
                if !self.roles.contains_key(role) && self.roles.len() >= MAX_ROLES {
                    return Err(InvalidInput::new(
                        "role",
                        format!("a policy has at most {MAX_ROLES} roles"),
                    ));
                }
                let grants = grants.iter().cloned().collect();
                self.roles.insert(role.clone(), Role { grants });
            }
            AuthChange::DeleteRole { name: role } => {
                self.roles.remove(role);
                for roles in self.bindings.values_mut() {
                    roles.remove(role);
                }
                self.bindings.retain(|_, roles| !roles.is_empty());
            }
            AuthChange::AddToken { identity, sha256 } => {
                if !self.tokens.contains_key(sha256) && self.tokens.len() >= MAX_TOKENS {
                    return Err(InvalidInput::new(
                        "sha256",
                        format!("a policy knows at most {MAX_TOKENS} tokens: revoke some first"),
                    ));
                }
                self.tokens.insert(sha256.clone(), identity.clone());
            }
            AuthChange::RevokeTokens { identity } => {
                self.tokens.retain(|_, owner| owner != identity);
            }
            AuthChange::Bind { identity, role } => self.bind(identity, role)?,
            AuthChange::Unbind { identity, role } => self.unbind(identity, role)?,
        }
        Ok(())
    }

    fn bind(&mut self, identity: &str, role: &str) -> Result<(), InvalidInput> {
        if !self.roles.contains_key(role) {
            return Err(InvalidInput::new(
                "role",
                format!("no role {role:?}: create it first"),
            ));
        }
        if !self.bindings.contains_key(identity) && self.bindings.len() >= MAX_BOUND_IDENTITIES {
            return Err(InvalidInput::new(
                "identity",
                format!("a policy binds at most {MAX_BOUND_IDENTITIES} identities"),
            ));
        }
        let roles = self.bindings.entry(identity.to_owned()).or_default();
        if !roles.contains(role) && roles.len() >= MAX_ROLES_PER_IDENTITY {
            return Err(InvalidInput::new(
                "role",
                format!("an identity has at most {MAX_ROLES_PER_IDENTITY} roles"),
            ));
        }
        roles.insert(role.to_owned());
        Ok(())
    }

    fn unbind(&mut self, identity: &str, role: &str) -> Result<(), InvalidInput> {
        let admins = self
            .bindings
            .values()
            .filter(|roles| roles.contains(ADMIN_ROLE))
            .count();
        // Off, too, once it has been on: only an admin may change it or turn it on again.
        let last = role == ADMIN_ROLE && self.is_admin(identity) && admins == 1;
        if last && self.was_enabled {
            return Err(InvalidInput::new(
                "identity",
                format!("{identity:?} is the last admin: bind another first"),
            ));
        }
        if let Some(roles) = self.bindings.get_mut(identity) {
            roles.remove(role);
            if roles.is_empty() {
                self.bindings.remove(identity);
            }
        }
        Ok(())
    }
}

/// Whether `identity` may act as `holder`: itself, or a name under `identity/`.
fn owns(identity: &str, holder: &str) -> bool {
    holder == identity
        || holder
            .strip_prefix(identity)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn verb(action: &Action) -> &'static str {
    match action {
        Action::ReadLease(_) => "read lease",
        Action::Hold { .. } => "hold lease",
        Action::Check(_) => "check a token of lease",
        Action::ReadKey(_) => "read key",
        Action::Write(_) => "write key",
        Action::Delete(_) => "delete key",
        Action::Admin(what) => what,
    }
}

fn role_field(role: &str) -> Result<(), InvalidInput> {
    name("role", role, Limits::MAX_NAME_BYTES)
}

fn grants_field(grants: &[Grant]) -> Result<(), InvalidInput> {
    if grants.len() > MAX_GRANTS_PER_ROLE {
        return Err(InvalidInput::new(
            "grants",
            format!("a role has at most {MAX_GRANTS_PER_ROLE} grants"),
        ));
    }
    for grant in grants {
        if grant.permission == Permission::Admin {
            return Err(InvalidInput::new(
                "grants",
                format!("admin is the {ADMIN_ROLE} role's alone: bind the identity to it"),
            ));
        }
        // A prefix may be empty (every name), and is no longer than a key.
        if grant.prefix.len() > Limits::MAX_KEY_BYTES {
            return Err(InvalidInput::new(
                "grants",
                format!(
                    "a prefix is at most {} bytes, got {}",
                    Limits::MAX_KEY_BYTES,
                    grant.prefix.len()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(permission: Permission, prefix: &str) -> Grant {
        Grant {
            permission,
            prefix: prefix.into(),
        }
    }

    /// A policy on: `admin` the admin, `team-a` holding and writing under `a/`, reading all.
    fn policy() -> Policy {
        let mut policy = Policy::default();
        for change in [
            AuthChange::Enable {
                admin: "admin".into(),
            },
            AuthChange::PutRole {
                name: "a".into(),
                grants: vec![
                    grant(Permission::Hold, "a/"),
                    grant(Permission::Write, "a/"),
                    grant(Permission::ReadLeases, ""),
                    grant(Permission::ReadKeys, ""),
                ],
            },
            AuthChange::Bind {
                identity: "team-a".into(),
                role: "a".into(),
            },
        ] {
            policy.apply(&change).unwrap();
        }
        policy
    }

    #[test]
    fn off_allows_everything_and_on_allows_only_what_is_granted() {
        let hold = Action::Hold {
            lease: "b/job",
            holder: "anyone",
        };
        assert_eq!(Policy::default().check(None, &hold), Ok(()));
        let p = policy();
        let team_a = Some("team-a");
        let own = Action::Hold {
            lease: "a/job",
            holder: "team-a/worker-1",
        };
        assert_eq!(p.check(team_a, &own), Ok(()));
        assert_eq!(p.check(team_a, &Action::Write("a/row")), Ok(()));
        assert_eq!(p.check(team_a, &Action::ReadKey("b/row")), Ok(()));
        let denied = p.check(team_a, &Action::Write("b/row")).unwrap_err();
        assert_eq!(denied.to_string(), "team-a may not write key \"b/row\"");
        assert!(p.check(team_a, &Action::Delete("a/row")).is_err());
        let denied = p
            .check(team_a, &Action::Admin("remove a member"))
            .unwrap_err();
        assert_eq!(denied.to_string(), "team-a may not remove a member");
        assert!(p
            .check(Some("stranger"), &Action::ReadKey("a/row"))
            .is_err());
    }

    #[test]
    fn an_identity_holds_only_as_holders_it_owns() {
        let p = policy();
        for holder in ["team-a", "team-a/x", "team-a/x/y"] {
            let action = Action::Hold {
                lease: "a/job",
                holder,
            };
            assert_eq!(p.check(Some("team-a"), &action), Ok(()), "{holder}");
        }
        for holder in ["team-b", "team-ab", "team-a-x", "admin"] {
            let action = Action::Hold {
                lease: "a/job",
                holder,
            };
            let denied = p.check(Some("team-a"), &action).unwrap_err();
            assert!(
                denied.to_string().contains("holds only as itself"),
                "{holder}: {denied}"
            );
        }
        // The admin too: it may do every admin call, and hold only as itself.
        let other = Action::Hold {
            lease: "a/job",
            holder: "team-a",
        };
        assert!(p.check(Some("admin"), &other).is_err());
    }

    #[test]
    fn without_a_certificate_nothing_is_allowed_once_on() {
        let denied = policy().check(None, &Action::ReadKey("a/x")).unwrap_err();
        assert_eq!(denied.identity, "anonymous");
        assert!(denied.to_string().contains("has no identity"), "{denied}");
    }

    #[test]
    fn the_admin_may_do_admin_calls_and_read_everything() {
        let p = policy();
        let admin = Some("admin");
        assert_eq!(p.check(admin, &Action::Admin("remove a member")), Ok(()));
        assert_eq!(p.check(admin, &Action::ReadKey("any")), Ok(()));
        assert_eq!(p.check(admin, &Action::ReadLease("any")), Ok(()));
        assert!(p.check(admin, &Action::Write("any")).is_err());
    }

    #[test]
    fn a_change_that_would_lock_the_cluster_out_or_break_the_policy_is_refused() {
        let mut p = policy();
        let before = p.clone();
        let refused = [
            AuthChange::Unbind {
                identity: "admin".into(),
                role: ADMIN_ROLE.into(),
            },
            AuthChange::DeleteRole {
                name: ADMIN_ROLE.into(),
            },
            AuthChange::PutRole {
                name: ADMIN_ROLE.into(),
                grants: vec![],
            },
            AuthChange::PutRole {
                name: "sneaky".into(),
                grants: vec![grant(Permission::Admin, "")],
            },
            AuthChange::Bind {
                identity: "team-b".into(),
                role: "no-such-role".into(),
            },
            AuthChange::Bind {
                identity: String::new(),
                role: "a".into(),
            },
            AuthChange::PutRole {
                name: "big".into(),
                grants: (0..=MAX_GRANTS_PER_ROLE)
                    .map(|i| grant(Permission::Hold, &i.to_string()))
                    .collect(),
            },
        ];
        for change in refused {
            assert!(p.apply(&change).is_err(), "{change:?}");
            assert_eq!(p, before, "{change:?} changed nothing");
        }
        // With a second admin, the first may go.
        p.apply(&AuthChange::Bind {
            identity: "ops".into(),
            role: ADMIN_ROLE.into(),
        })
        .unwrap();
        p.apply(&AuthChange::Unbind {
            identity: "admin".into(),
            role: ADMIN_ROLE.into(),
        })
        .unwrap();
        assert!(p.check(Some("admin"), &Action::Admin("x")).is_err());
        assert_eq!(p.check(Some("ops"), &Action::Admin("x")), Ok(()));
    }

    #[test]
    fn deleting_a_role_unbinds_it_and_a_grant_change_takes_effect_at_once() {
        let mut p = policy();
        p.apply(&AuthChange::PutRole {
            name: "a".into(),
            grants: vec![grant(Permission::Write, "a/")],
        })
        .unwrap();
        assert!(p.check(Some("team-a"), &Action::ReadKey("a/x")).is_err());
        p.apply(&AuthChange::DeleteRole { name: "a".into() })
            .unwrap();
        assert!(!p.bindings().contains_key("team-a"));
        assert!(p.check(Some("team-a"), &Action::Write("a/x")).is_err());
    }

    #[test]
    fn permission_names_parse_back() {
        for permission in Permission::ALL {
            assert_eq!(Permission::parse(permission.name()), Some(permission));
        }
        assert_eq!(Permission::parse("root"), None);
    }
}
