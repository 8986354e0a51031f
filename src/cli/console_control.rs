//! `cluster`'s side of the console's buttons (each node's `/ui`): a listener on loopback that
//! the local cluster's nodes reach with the secret they were given in their environment
//! ([`CONSOLE_CONTROL_ENV`]), a line a request (`SECRET kill 2`, `SECRET state`), each answered
//! in a line: an action by the monitor, which owns the nodes' processes; the nodes' states from
//! what the monitor last set.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::local::LocalCluster;
pub use crate::node::CONSOLE_CONTROL_ENV;

/// The longest request line read: a secret and an action.
const MAX_LINE: u64 = 256;

/// How long a node has to send its request line.
const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A node's request, for the monitor to answer.
pub struct Request {
    line: String,
    reply: oneshot::Sender<String>,
}

/// The listener's address and secret, for the nodes' environment, its requests, and the
/// nodes' states as the monitor last set them (a `state` request is answered from them at
/// once, not queued behind the monitor's rounds).
pub struct Control {
    pub addr: SocketAddr,
    pub secret: String,
    pub requests: mpsc::Receiver<Request>,
    pub states: Arc<Mutex<States>>,
}

impl Control {
    /// What the nodes are given in [`CONSOLE_CONTROL_ENV`].
    pub fn env_value(&self) -> String {
        format!("{} {}", self.addr, self.secret)
    }
}

/// A secret no other user of this machine can guess: 128 bits from the kernel, in hex.
fn secret() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `given` is `expected`, compared in time that does not depend on where they differ.
fn same_secret(given: &str, expected: &str) -> bool {
    let differ = (given.bytes().zip(expected.bytes())).fold(0, |d, (a, b)| d | (a ^ b));
    given.len() == expected.len() && differ == 0
}

/// Listens on a free loopback port for the nodes' requests, until the process ends.
pub async fn listen(nodes: impl IntoIterator<Item = u64>) -> std::io::Result<Control> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let (addr, secret) = (listener.local_addr()?, secret()?);
    let (send, requests) = mpsc::channel(16);
    let states = Arc::new(Mutex::new(
        nodes.into_iter().map(|id| (id, "running")).collect(),
    ));
    let (expected, shown) = (secret.clone(), states.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (send, expected, shown) = (send.clone(), expected.clone(), shown.clone());
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                let mut read = BufReader::new(read.take(MAX_LINE));
                let read = tokio::time::timeout(READ_WAIT, read.read_line(&mut line)).await;
                if !matches!(read, Ok(Ok(_))) {
                    return;
                }
                let answer = match line.trim_end().split_once(' ') {
                    Some((given, _)) if !same_secret(given, &expected) => {
                        "error not this cluster's secret".into()
                    }
                    Some((_, "state")) => {
                        describe(&shown.lock().unwrap_or_else(|p| p.into_inner()))
                    }
                    Some((_, request)) => {
                        let (reply, answered) = oneshot::channel();
                        let line = request.to_owned();
                        let _ = send.send(Request { line, reply }).await;
                        answered.await.unwrap_or_else(|_| "error stopping".into())
                    }
                    None => "error not this cluster's secret".into(),
                };
                let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
            });
        }
    });
    Ok(Control {
        addr,
        secret,
        requests,
        states,
    })
}

/// Every node's state, as the console reads it: `1=running 2=killed ...`.
fn describe(states: &States) -> String {
    let pairs: Vec<String> = states.iter().map(|(id, s)| format!("{id}={s}")).collect();
    pairs.join(" ")
}

/// What each node is, as the console shows it: `running`, `paused`, `killed` (from the
/// console) or `exited` (by itself).
pub type States = BTreeMap<u64, &'static str>;

/// Answers `request`: the node's process killed, paused, resumed or restarted.
pub fn answer(cluster: &mut LocalCluster, states: &Mutex<States>, request: Request) {
    let mut states = states.lock().unwrap_or_else(|p| p.into_inner());
    let answer = act(cluster, &mut states, &request.line);
    let _ = request.reply.send(answer);
}

fn act(cluster: &mut LocalCluster, states: &mut States, line: &str) -> String {
    let Some((action, id)) = line.split_once(' ') else {
        return format!("error {line:?} is no request");
    };
    let Some(id) = id.parse().ok().filter(|id| states.contains_key(id)) else {
        return format!("error there is no node {id} in this cluster");
    };
    let running = cluster.pid(id).is_some();
    let state = match (action, running) {
        ("kill", true) => {
            cluster.kill(id);
            "killed"
        }
        ("pause", true) => {
            cluster.signal(id, libc::SIGSTOP);
            "paused"
        }
        ("resume", true) => {
            cluster.signal(id, libc::SIGCONT);
            "running"
        }
        ("restart", _) => {
            cluster.kill(id);
            if let Err(e) = cluster.start(id) {
                return format!("error node {id} did not start: {e}");
            }
            "running"
        }
        (_, false) => return format!("error node {id} is not running: restart it"),
        _ => return format!("error {action:?} is no action"),
    };
    println!("node {id}: {action} from the console");
    states.insert(id, state);
    state.to_owned()
}
