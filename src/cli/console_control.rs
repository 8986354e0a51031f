//! `cluster`'s side of the console's buttons (each node's `/ui`): a listener on loopback that
//! the local cluster's nodes reach with the secret they were given in their environment
//! ([`CONSOLE_CONTROL_ENV`]), a line a request (`SECRET kill 2`, `SECRET state`), each answered
//! in a line by the monitor, which owns the nodes' processes.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::local::LocalCluster;
pub use crate::node::CONSOLE_CONTROL_ENV;

/// The longest request line read: a secret and an action.
const MAX_LINE: u64 = 256;

/// A node's request, for the monitor to answer.
pub struct Request {
    line: String,
    reply: oneshot::Sender<String>,
}

/// The listener's address and secret, for the nodes' environment, and its requests.
pub struct Control {
    pub addr: SocketAddr,
    pub secret: String,
    pub requests: mpsc::Receiver<Request>,
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

/// Listens on a free loopback port for the nodes' requests, until the process ends.
pub async fn listen() -> std::io::Result<Control> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let (addr, secret) = (listener.local_addr()?, secret()?);
    let (send, requests) = mpsc::channel(16);
    let expected = secret.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (send, expected) = (send.clone(), expected.clone());
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                let mut read = BufReader::new(read.take(MAX_LINE));
                if read.read_line(&mut line).await.is_err() {
                    return;
                }
                let answer = match line.trim_end().split_once(' ') {
                    Some((given, request)) if given == expected => {
                        let (reply, answered) = oneshot::channel();
                        let line = request.to_owned();
                        let _ = send.send(Request { line, reply }).await;
                        answered.await.unwrap_or_else(|_| "error stopping".into())
                    }
                    _ => "error not this cluster's secret".into(),
                };
                let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
            });
        }
    });
    Ok(Control {
        addr,
        secret,
        requests,
    })
}

/// What each node is, as the console shows it: `running`, `paused`, `killed` (from the
/// console) or `exited` (by itself).
pub type States = BTreeMap<u64, &'static str>;

/// Answers `request`: the node's process killed, paused, resumed or restarted, or every node's
/// state (`1=running 2=killed ...`).
pub fn answer(cluster: &mut LocalCluster, states: &mut States, request: Request) {
    let answer = act(cluster, states, &request.line);
    let _ = request.reply.send(answer);
}

fn act(cluster: &mut LocalCluster, states: &mut States, line: &str) -> String {
    if line == "state" {
        let pairs: Vec<String> = states.iter().map(|(id, s)| format!("{id}={s}")).collect();
        return pairs.join(" ");
    }
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
