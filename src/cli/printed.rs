//! What the CLI prints: with `-o json`, where the client's own answers (which serialize with
//! its `serde` feature) do not say it all, one derived type per shape, snake_case keys; for
//! people, tables.

use std::borrow::Cow;

use comfy_table::{CellAlignment, ColumnConstraint, Table, Width};
use leasehold_client::LeaseState;
use serde::Serialize;

use super::Output;
use crate::proto::v1 as pb;

/// Before and after each cell of a table: columns two spaces apart.
const PADDING: (u16, u16) = (0, 2);

/// A table for people: `header`, no borders, columns two spaces apart, each as wide as its
/// widest cell and at least its `widths` entry in characters (0 for none); the columns `right`
/// align right (numbers). Printed with [`lines`].
pub fn table(header: &[&str], right: &[usize], widths: &[u16]) -> Table {
    let mut table = Table::new();
    table
        .load_style(comfy_table::presets::NOTHING)
        .set_header(header.to_vec());
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding(PADDING);
        if right.contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        if let Some(&width) = widths.get(i).filter(|w| **w > 0) {
            // comfy-table's widths count the padding too.
            let padded = width + PADDING.0 + PADDING.1;
            column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(padded)));
        }
    }
    table
}

/// Prints `value` as one JSON object, or the text `text` makes, for people.
pub fn print<T: Serialize>(output: Output, value: &T, text: impl FnOnce() -> String) {
    match output {
        Output::Text => println!("{}", text()),
        Output::Json => println!("{}", json(value)),
    }
}

/// `value` as one line of JSON. The CLI's types serialize as plain maps, which never fail.
pub fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("a derived Serialize of plain fields")
}

/// `table`'s lines, without the padding comfy-table leaves after the last column.
pub fn lines(table: &Table) -> impl Iterator<Item = String> + '_ {
    table.lines().map(|line| line.trim_end().to_owned())
}

/// A row's key and its value as text (`null` when absent): `get` and `keys`.
#[derive(Serialize)]
pub struct Row<'a> {
    pub key: &'a str,
    pub value: Option<Cow<'a, str>>,
}

/// A lease by name: `lease` and `leases`.
#[derive(Serialize)]
pub struct NamedLease<'a> {
    pub lease: &'a str,
    #[serde(flatten)]
    pub state: &'a LeaseState,
}

/// An entry of a listing, with the store time its page was read at.
#[derive(Serialize)]
pub struct Listed<T> {
    #[serde(flatten)]
    pub entry: T,
    pub store_time_ms: u64,
}

/// What `advance` answers: `{"outcome": "advanced"}`, beside where it was applied.
#[derive(Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Advanced {
    Advanced,
}

/// `status`: the nodes, as each answered (or as unreachable).
#[derive(Serialize)]
pub struct Nodes<'a> {
    pub nodes: Vec<NodeRow<'a>>,
}

/// One node of `status`.
#[derive(Serialize)]
pub struct NodeRow<'a> {
    id: u64,
    address: &'a str,
    peer_address: &'a str,
    pid: u32,
    role: &'static str,
    term: u64,
    leader: u64,
    last_log_index: u64,
    applied_index: u64,
    state_digest: u64,
    store_time_ms: u64,
    manual_clock: bool,
    error: &'a str,
    leases: u64,
    rows: u64,
    sessions: u64,
    snapshot_bytes: u64,
    tls: bool,
    client_certificates: bool,
    authorization: bool,
    version: &'a str,
    protocol: u32,
    log_format: u32,
    clock_rate_ratio: f64,
    clock_odd: bool,
    clock_odd_reason: &'a str,
    disk_free_bytes: u64,
    disk_size_bytes: u64,
    http_address: &'a str,
    snapshot_index: u64,
    purged_index: u64,
}

impl<'a> NodeRow<'a> {
    pub fn of(n: &'a pb::NodeStatus, role: &'static str) -> Self {
        NodeRow {
            id: n.id,
            address: &n.address,
            peer_address: &n.peer_address,
            pid: n.pid,
            role,
            term: n.term,
            leader: n.leader,
            last_log_index: n.last_log_index,
            applied_index: n.applied_index,
            state_digest: n.state_digest,
            store_time_ms: n.store_time_ms,
            manual_clock: n.manual_clock,
            error: &n.error,
            leases: n.leases,
            rows: n.rows,
            sessions: n.sessions,
            snapshot_bytes: n.snapshot_bytes,
            tls: n.tls,
            client_certificates: n.client_certificates,
            authorization: n.authorization,
            version: &n.version,
            protocol: n.protocol,
            log_format: n.log_format,
            clock_rate_ratio: n.clock_rate_ratio,
            clock_odd: n.clock_odd,
            clock_odd_reason: &n.clock_odd_reason,
            disk_free_bytes: n.disk_free_bytes,
            disk_size_bytes: n.disk_size_bytes,
            http_address: &n.http_address,
            snapshot_index: n.snapshot_index,
            purged_index: n.purged_index,
        }
    }
}

/// `auth whoami`.
#[derive(Serialize)]
pub struct WhoAmI<'a> {
    pub identity: &'a str,
    pub auth_enabled: bool,
    pub roles: &'a [String],
}

/// `auth token add`: the token, shown this once.
#[derive(Serialize)]
pub struct TokenAdded<'a> {
    pub token: &'a str,
    pub log_index: u64,
}

/// Any other policy change: where it was logged.
#[derive(Serialize)]
pub struct PolicyChanged {
    pub log_index: u64,
}

/// `auth show`: roles by name with their grants (`permission:prefix`), bindings, and tokens
/// by the start of their hash.
#[derive(Serialize)]
pub struct Policy<'a> {
    pub enabled: bool,
    pub roles: std::collections::BTreeMap<&'a str, Vec<String>>,
    pub bindings: Vec<Binding<'a>>,
    pub tokens: Vec<Token<'a>>,
}

#[derive(Serialize)]
pub struct Binding<'a> {
    pub identity: &'a str,
    pub role: &'a str,
}

#[derive(Serialize)]
pub struct Token<'a> {
    pub identity: &'a str,
    pub sha256_prefix: &'a str,
}

/// `bench -o json`: one workload's run.
#[derive(Serialize)]
pub struct BenchReport<'a> {
    pub workload: String,
    pub clients: usize,
    pub leases_per_request: usize,
    pub duration_s: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub refused: u64,
    pub errors: u64,
    pub last_error: Option<&'a str>,
    pub floor: Option<super::floor::Floor>,
    pub p50_vs_floor: Option<f64>,
    pub p50_vs_shared_floor: Option<f64>,
}
