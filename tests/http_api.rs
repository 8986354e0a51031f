//! `serve --http-listen`: the client API over HTTP and JSON, driven with curl as a shell
//! script would drive it.

mod harness;

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::{wait_for, with_http, Harness};
use serde_json::{json, Value};

/// A cluster whose nodes serve HTTP too.
async fn with_http_api() -> (Harness, Vec<String>) {
    curl_installed();
    let mut http = Vec::new();
    let h = Harness::start_configured(3, |cluster| {
        let (cluster, addrs) = with_http(cluster);
        http = addrs;
        cluster
    })
    .await;
    (h, http)
}

/// A TLS cluster with authorization on (`admin` its admin, client certificates optional) whose
/// nodes serve HTTP too.
async fn authorized_with_http() -> (Harness, Vec<String>) {
    curl_installed();
    let mut http = Vec::new();
    let h = Harness::start_authorized_with(3, false, |cluster| {
        let (cluster, addrs) = with_http(cluster.with_client_certs_optional());
        http = addrs;
        cluster
    })
    .await;
    (h, http)
}

fn https_url(http: &[String], rpc: &str) -> String {
    format!("https://{}/v1/{rpc}", http[1])
}

/// curl's flags for TLS with the cluster's CA, as `identity` (its certificate) if one is given.
fn tls_flags(h: &Harness, identity: Option<&str>, extra: &[&str]) -> Vec<OsString> {
    let ca = h.identity_files(leasehold::tls::certs::ADMIN_NAME).ca;
    let mut flags: Vec<OsString> = vec!["--cacert".into(), ca.into()];
    if let Some(name) = identity {
        let files = h.identity_files(name);
        flags.extend([
            "--cert".into(),
            files.cert.into(),
            "--key".into(),
            files.key.into(),
        ]);
    }
    flags.extend(extra.iter().map(OsString::from));
    flags
}

/// Fails with the package to install when curl is missing.
fn curl_installed() {
    let found = Command::new("curl").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "these tests drive the HTTP API with curl: install it (apt-get install curl)"
    );
}

/// `curl -X POST URL -d BODY` with `extra` flags: the HTTP status and the JSON answer.
fn post<S: AsRef<OsStr>>(url: &str, body: &str, extra: &[S]) -> (u16, Value) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20", "-X", "POST"])
        .args(["--write-out", "\n%{http_code}", "--data-binary", body])
        .args(extra)
        .arg(url)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (answer, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code: u16 = code.trim().parse().unwrap_or_else(|_| {
        panic!(
            "curl {url}: {text} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let answer = match answer.trim() {
        "" => Value::Null,
        json => serde_json::from_str(json).unwrap_or_else(|e| panic!("{url}: {e}: {json}")),
    };
    (code, answer)
}

fn call(addr: &str, rpc: &str, body: Value) -> (u16, Value) {
    post::<&str>(&format!("http://{addr}/v1/{rpc}"), &body.to_string(), &[])
}

/// A proto3 JSON uint64, which is a string.
fn u64_of(value: &Value) -> u64 {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a uint64: {value}"))
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| n << 8 | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            let sextet = (n >> (18 - 6 * i)) & 63;
            out.push(if i <= chunk.len() {
                ALPHABET[sextet as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_seed_scenario_through_curl_a_frozen_holders_late_write_is_refused() {
    let (_h, http) = with_http_api().await;
    let acquire = |node: usize, holder: &str| {
        // Long enough for A's fenced put and B's refused acquire (two curl calls) to come first.
        let body = json!({"lease": "seed/lease", "holder": holder, "ttlMs": "3000"});
        call(&http[node], "Acquire", body)
    };
    let put = |node: usize, value: &[u8], token: u64| {
        let fence = json!({"lease": "seed/lease", "token": token.to_string()});
        call(
            &http[node],
            "Put",
            json!({"key": "seed/file", "value": base64(value), "fence": fence}),
        )
    };

    let (status, a) = acquire(0, "a");
    assert_eq!(status, 200, "{a}");
    let a_token = u64_of(&a["granted"]["token"]);
    let (status, written) = put(1, b"a1", a_token);
    assert_eq!(
        (status, written.get("written").is_some()),
        (200, true),
        "{written}"
    );
    let (_, held) = acquire(2, "b");
    assert_eq!(held["heldBy"]["holder"], "a", "{held}");

    // A freezes past its TTL; B is granted once it runs out.
    let b_token = wait_for("B's grant", Duration::from_secs(10), || async {
        let (_, b) = acquire(1, "b");
        b.get("granted").map(|g| u64_of(&g["token"]))
    })
    .await;
    assert!(b_token > a_token);
    let (status, written) = put(2, b"b1", b_token);
    assert_eq!(
        (status, written.get("written").is_some()),
        (200, true),
        "{written}"
    );

    let (status, late) = put(0, b"a2", a_token);
    assert_eq!(status, 200, "a refusal is an answer: {late}");
    assert_eq!(u64_of(&late["staleToken"]["fence"]), b_token, "{late}");
    let (_, row) = call(&http[1], "Get", json!({"key": "seed/file"}));
    assert_eq!(row["value"], base64(b"b1"), "{row}");
    let (_, stale) = call(
        &http[2],
        "CheckToken",
        json!({"lease": "seed/lease", "token": a_token}),
    );
    assert!(stale.get("stale").is_some(), "{stale}");

    // The leases under a prefix, and the rows, as curl lists them.
    let page = json!({"page": {"prefix": "seed/", "limit": 10}});
    let (_, listed) = call(&http[0], "ListLeases", page.clone());
    let lease = &listed["leases"][0];
    assert_eq!(
        (&lease["lease"], &lease["holder"]),
        (&json!("seed/lease"), &json!("b")),
        "{listed}"
    );
    assert_eq!(u64_of(&lease["token"]), b_token, "{listed}");
    assert!(
        listed.get("nextPageToken").is_none(),
        "the last page: {listed}"
    );
    let (_, rows) = call(&http[1], "ListKeys", page);
    assert_eq!(rows["keys"][0]["value"], base64(b"b1"), "{rows}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_calls_get_an_http_status_and_the_grpc_error_as_json() {
    let (_h, http) = with_http_api().await;
    let node = &http[0];
    let (status, e) = call(
        node,
        "Acquire",
        json!({"lease": "x", "holder": "h", "ttl": 5}),
    );
    assert_eq!(
        (status, e["status"].as_str()),
        (400, Some("INVALID_ARGUMENT")),
        "{e}"
    );
    assert_eq!(e["metadata"]["field"], "body");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `ttl`"),
        "{e}"
    );

    let (status, e) = call(
        node,
        "Acquire",
        json!({"lease": "x", "holder": "h", "ttlMs": 0}),
    );
    assert_eq!(
        (status, e["code"].as_i64(), e["reason"].as_str()),
        (400, Some(3), Some("INVALID_INPUT")),
        "{e}"
    );
    assert_eq!(e["metadata"]["field"], "ttl_ms");
    assert_eq!(e["indeterminate"], false);
    let (_, lease) = call(node, "GetLease", json!({"lease": "x"}));
    assert!(lease.get("token").is_none(), "nothing was granted: {lease}");

    // A bad number names its field as gRPC's validation does, and says what it takes
    // (issue "A door no one can wedge", item 10: it was "data did not match any variant of
    // untagged enum Content" with field "body").
    for bad in [
        json!(-5),
        json!("soon"),
        json!(1.5),
        json!("99999999999999999999"),
    ] {
        let (status, e) = call(
            node,
            "Acquire",
            json!({"lease": "x", "holder": "h", "ttlMs": bad}),
        );
        assert_eq!(
            (status, e["metadata"]["field"].as_str()),
            (400, Some("ttl_ms")),
            "{e}"
        );
        let message = e["message"].as_str().unwrap();
        assert!(!message.contains("untagged"), "{e}");
        assert!(message.contains("integer"), "{e}");
    }
    let renewal = json!({"lease": "x", "holder": "h", "token": "1", "ttlMs": -1});
    let (status, e) = call(node, "Renew", json!({"leases": [renewal]}));
    assert_eq!(
        (status, e["metadata"]["field"].as_str()),
        (400, Some("leases[0].ttl_ms")),
        "{e}"
    );

    let (status, e) = post::<&str>(&format!("http://{node}/v1/Acquire"), "{not json", &[]);
    assert_eq!(
        (status, e["metadata"]["field"].as_str()),
        (400, Some("body")),
        "{e}"
    );
    let (status, e) = call(node, "Explode", json!({}));
    assert_eq!(
        (status, e["status"].as_str()),
        (404, Some("UNIMPLEMENTED")),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("Acquire"), "{e}");
    // Each refusal says what is served, in the error body (found in a walkthrough: these two
    // were empty); the port's root leads a browser to the console.
    let (status, e) = post(&format!("http://{node}/v1/Get"), "", &["-X", "GET"]);
    assert_eq!(status, 405, "{e}");
    assert!(e["message"].as_str().unwrap().contains("POST"), "{e}");
    let (status, e) = post(&format!("http://{node}/nowhere"), "", &["-X", "GET"]);
    assert_eq!(status, 404, "{e}");
    let said = e["message"].as_str().unwrap();
    assert!(said.contains("/v1/") && said.contains("/ui"), "{e}");
    let (status, _) = post(
        &format!("http://{node}/"),
        "",
        &["-X", "GET", "-o", "/dev/null"],
    );
    assert_eq!(status, 303);
    let (status, _) = post(
        &format!("http://{node}/"),
        "",
        &["-X", "GET", "-L", "-o", "/dev/null"],
    );
    assert_eq!(status, 200, "the redirect leads to the console");

    let huge = format!("{{\"key\":\"k\",\"value\":\"{}\"}}", "A".repeat(3 << 20));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), huge).unwrap();
    let (status, e) = post::<&str>(
        &format!("http://{node}/v1/Put"),
        &format!("@{}", file.path().display()),
        &[],
    );
    assert_eq!(
        (status, e["metadata"]["field"].as_str()),
        (413, Some("body")),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("bytes"), "{e}");

    // An empty body is the empty message.
    let (status, nodes) = post::<&str>(&format!("http://{node}/v1/Status"), "", &[]);
    assert_eq!(
        (status, nodes["nodes"].as_array().map(Vec::len)),
        (200, Some(3)),
        "{nodes}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_is_a_stream_of_json_lines() {
    let (_h, http) = with_http_api().await;
    let (_, granted) = call(
        &http[0],
        "Acquire",
        json!({"lease": "w/a", "holder": "h", "ttlMs": "60000"}),
    );
    let index = u64_of(&granted["applied"]["logIndex"]);
    let mut curl = Command::new("curl")
        .args(["--silent", "--no-buffer", "--max-time", "20", "-X", "POST"])
        .arg("--data-binary")
        .arg(json!({"prefix": "w/", "fromIndex": index.to_string()}).to_string())
        .arg(format!("http://{}/v1/Watch", http[1]))
        .stdout(Stdio::piped())
        .spawn()
        .expect("run curl");
    let lines = BufReader::new(curl.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines {
        let response: Value = serde_json::from_str(&line.unwrap()).unwrap();
        seen.extend(response["events"].as_array().cloned().unwrap_or_default());
        if !seen.is_empty() {
            break;
        }
    }
    let _ = curl.kill();
    let _ = curl.wait();
    assert!(!seen.is_empty(), "no event within curl's 20 s");
    assert_eq!(seen[0]["kind"], "EVENT_KIND_GRANTED", "{seen:?}");
    assert_eq!(u64_of(&seen[0]["logIndex"]), index);
    assert_eq!(seen[0]["holder"], "h");
}

#[tokio::test(flavor = "multi_thread")]
async fn over_tls_the_caller_is_its_certificate_and_the_policy_applies() {
    let (h, http) = authorized_with_http().await;
    let https = |identity: Option<&str>, rpc: &str, body: Value| {
        post(
            &https_url(&http, rpc),
            &body.to_string(),
            &tls_flags(&h, identity, &[]),
        )
    };
    let (status, me) = https(Some("admin"), "WhoAmI", json!({}));
    assert_eq!(
        (status, me["identity"].as_str()),
        (200, Some("admin")),
        "{me}"
    );
    assert_eq!(me["authEnabled"], true);

    // The console's buttons are an admin's: another identity is denied before anything else.
    let kill = format!("https://{}/ui/control/1/kill", http[1]);
    let (status, e) = post(&kill, "", &tls_flags(&h, Some("outsider"), &[]));
    assert_eq!((status, e["reason"].as_str()), (403, Some("DENIED")), "{e}");
    let (status, e) = post(&kill, "", &tls_flags(&h, Some("admin"), &[]));
    assert!(
        status == 400 && e["message"].as_str().unwrap().contains("no local cluster"),
        "{e}"
    );

    let put = json!({"key": "t/k", "value": base64(b"v")});
    let (status, e) = https(Some("outsider"), "Put", put.clone());
    assert_eq!((status, e["reason"].as_str()), (403, Some("DENIED")), "{e}");
    assert_eq!(e["metadata"]["identity"], "outsider", "{e}");
    let (status, e) = https(None, "Put", put.clone());
    assert_eq!(
        (status, e["status"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{e}"
    );
    let (status, e) = https(Some("admin"), "Put", put.clone());
    assert_eq!(
        (status, e["reason"].as_str()),
        (403, Some("DENIED")),
        "admin alone: {e}"
    );

    // The policy changed over HTTP by the admin, then in force for the writer.
    let role = json!({"name": "writer", "grants": [{"permission": "write", "prefix": "t/"}]});
    let (status, changed) = https(Some("admin"), "ChangePolicy", json!({"putRole": role}));
    assert_eq!(status, 200, "{changed}");
    let bind = json!({"identity": "writer-1", "role": "writer"});
    let (status, changed) = https(Some("admin"), "ChangePolicy", json!({"bind": bind}));
    assert_eq!(status, 200, "{changed}");
    let (status, written) = https(Some("writer-1"), "Put", put);
    assert_eq!(
        (status, written.get("written").is_some()),
        (200, true),
        "{written}"
    );
    let elsewhere = json!({"key": "u/k", "value": base64(b"v")});
    let (status, e) = https(Some("writer-1"), "Put", elsewhere);
    assert_eq!((status, e["reason"].as_str()), (403, Some("DENIED")), "{e}");

    // Plain HTTP to a TLS node is refused before any request is read.
    let plain = Command::new("curl")
        .args(["--silent", "--max-time", "5", "-X", "POST", "-d", "{}"])
        .arg(format!("http://{}/v1/Status", http[1]))
        .output()
        .unwrap();
    assert!(!plain.status.success(), "{plain:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn over_tls_a_bearer_token_is_an_identity_and_a_revoked_watch_ends_with_an_error_line() {
    let (h, http) = authorized_with_http().await;
    let admin = |body: Value| {
        let (status, answer) = post(
            &https_url(&http, "ChangePolicy"),
            &body.to_string(),
            &tls_flags(&h, Some("admin"), &[]),
        );
        assert_eq!(status, 200, "{body}: {answer}");
    };
    let grants = json!([{"permission": "write", "prefix": "t/"}, {"permission": "read-leases", "prefix": "t/"}]);
    admin(json!({"putRole": {"name": "service", "grants": grants}}));
    admin(json!({"bind": {"identity": "svc", "role": "service"}}));
    let token = leasehold::tls::bearer::new_token();
    let sha256 = leasehold::tls::bearer::sha256(&token);
    admin(json!({"addToken": {"identity": "svc", "sha256": sha256}}));

    let header = format!("Authorization: Bearer {token}");
    let as_svc = tls_flags(&h, None, &["-H", &header]);
    let (status, me) = post(&https_url(&http, "WhoAmI"), "{}", &as_svc);
    assert_eq!(
        (status, me["identity"].as_str()),
        (200, Some("svc")),
        "{me}"
    );
    let put = json!({"key": "t/k", "value": base64(b"v")}).to_string();
    let (status, written) = post(&https_url(&http, "Put"), &put, &as_svc);
    assert_eq!(
        (status, written.get("written").is_some()),
        (200, true),
        "{written}"
    );

    // svc watches t/; the admin unbinds it; the stream ends with the denial as its last line.
    let mut curl = Command::new("curl")
        .args([
            "--silent",
            "--no-buffer",
            "--max-time",
            "20",
            "-X",
            "POST",
            "-d",
        ])
        .arg(json!({"prefix": "t/"}).to_string())
        .args(&as_svc)
        .arg(https_url(&http, "Watch"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("run curl");
    let mut lines = BufReader::new(curl.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the watch's first line").unwrap();
    assert!(
        serde_json::from_str::<Value>(&first)
            .unwrap()
            .get("error")
            .is_none(),
        "{first}"
    );
    admin(json!({"unbind": {"identity": "svc", "role": "service"}}));
    let last = lines.map(Result::unwrap).last().expect("a last line");
    let _ = curl.wait();
    let last: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(last["error"]["status"], "PERMISSION_DENIED", "{last}");
    assert_eq!(last["error"]["reason"], "DENIED", "{last}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_rpc_of_the_proto_is_served_and_browsers_are_refused() {
    let (_h, http) = with_http_api().await;
    let proto = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto/leasehold/v1/leasehold.proto"),
    )
    .unwrap();
    let rpcs: Vec<&str> = proto
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .map(|l| l.split('(').next().unwrap().trim())
        .collect();
    assert_eq!(rpcs.len(), 24, "{rpcs:?}");
    for &rpc in &rpcs {
        // Each answers something of its own (Watch streams until curl's time runs out).
        let output = Command::new("curl")
            .args(["--silent", "--output", "/dev/null", "--max-time", "3"])
            .args(["--write-out", "%{http_code}", "-X", "POST", "-d", "{}"])
            .arg(format!("http://{}/v1/{rpc}", http[0]))
            .output()
            .unwrap();
        let code = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(code != "404" && code != "000", "{rpc}: HTTP {code}");
    }
    // The error for a name it does not serve lists every one it does.
    let (_, e) = call(&http[0], "Explode", json!({}));
    for rpc in &rpcs {
        assert!(e["message"].as_str().unwrap().contains(rpc), "{rpc}: {e}");
    }
    let (status, e) = post(
        &format!("http://{}/v1/Put", http[0]),
        &json!({"key": "k"}).to_string(),
        &["-H", "Origin: https://example.com"],
    );
    assert_eq!(
        (status, e["metadata"]["field"].as_str()),
        (400, Some("origin")),
        "{e}"
    );
    // The console's own calls come from this node's origin, and are taken on its address; a
    // site whose name points at the node (DNS rebinding) is the same origin by name, refused.
    let status_url = format!("http://{}/v1/Status", http[0]);
    let own = format!("Origin: http://{}", http[0]);
    let (status, _) = post(&status_url, "{}", &["-H", own.as_str()]);
    assert_eq!(status, 200);
    let port = http[0].rsplit_once(':').unwrap().1;
    let (host, origin) = (
        format!("Host: rebind.example:{port}"),
        format!("Origin: http://rebind.example:{port}"),
    );
    let (status, e) = post(
        &status_url,
        "{}",
        &["-H", host.as_str(), "-H", origin.as_str()],
    );
    assert_eq!(
        (status, e["metadata"]["field"].as_str()),
        (400, Some("origin")),
        "{e}"
    );
    // A node no `cluster` supervises has no buttons to press.
    let (status, e) = post::<&str>(&format!("http://{}/ui/control/1/kill", http[0]), "", &[]);
    assert_eq!(status, 400, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("no local cluster"),
        "{e}"
    );
}

/// `POST /v3/<path>` on etcd's JSON gateway.
fn v3(addr: &str, path: &str, body: Value) -> (u16, Value) {
    post::<&str>(&format!("http://{addr}/v3/{path}"), &body.to_string(), &[])
}

/// An int64 of etcd's gateway, which is a string.
fn i64_of(value: &Value) -> i64 {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an int64: {value}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn etcds_json_gateway_answers_as_etcds_with_proto_names_and_base64() {
    let (_h, http) = with_http_api().await;
    let key = |k: &str| base64(k.as_bytes());
    let (status, put) = v3(
        &http[0],
        "kv/put",
        json!({"key": key("gw/a"), "value": key("1")}),
    );
    assert_eq!(status, 200, "{put}");
    let written_at = i64_of(&put["header"]["revision"]);
    v3(
        &http[1],
        "kv/put",
        json!({"key": key("gw/b"), "value": key("2")}),
    );
    // A follower answers with the leader's state: a range over the prefix, etcd's way.
    let (_, range) = v3(
        &http[2],
        "kv/range",
        json!({"key": key("gw/"), "range_end": key("gw0"), "sort_order": "DESCEND"}),
    );
    assert_eq!(range["count"], "2", "{range}");
    assert_eq!(range["kvs"][0]["key"], key("gw/b"), "{range}");
    assert_eq!(
        i64_of(&range["kvs"][1]["create_revision"]),
        written_at,
        "{range}"
    );
    assert_eq!(range["kvs"][1]["version"], "1", "{range}");

    // A compare-and-swap on the value, as etcd3gw's `replace` sends it.
    let swap = |from: &str, to: &str| {
        let body = json!({
            "compare": [{"key": key("gw/a"), "result": "EQUAL", "target": "VALUE", "value": key(from)}],
            "success": [{"request_put": {"key": key("gw/a"), "value": key(to)}}],
            "failure": [{"request_range": {"key": key("gw/a")}}],
        });
        v3(&http[1], "kv/txn", body).1
    };
    assert_eq!(swap("1", "3")["succeeded"], true);
    let lost = swap("1", "4");
    assert_eq!(
        lost.get("succeeded"),
        None,
        "false is left out, as etcd leaves it: {lost}"
    );
    let current = &lost["responses"][0]["response_range"]["kvs"][0]["value"];
    assert_eq!(current, &json!(key("3")), "{lost}");

    // A lease: granted, a key under it, its time to live, a keep-alive.
    let (_, lease) = v3(&http[0], "lease/grant", json!({"TTL": "30"}));
    let id = i64_of(&lease["ID"]);
    assert_eq!(lease["TTL"], "30", "{lease}");
    v3(
        &http[2],
        "kv/put",
        json!({"key": key("gw/s"), "value": key("x"), "lease": id.to_string()}),
    );
    let (_, ttl) = v3(
        &http[1],
        "lease/timetolive",
        json!({"ID": id.to_string(), "keys": true}),
    );
    assert_eq!(
        ttl["grantedTTL"], "30",
        "etcd's proto names it grantedTTL: {ttl}"
    );
    assert_eq!(ttl["keys"][0], key("gw/s"), "{ttl}");
    let (status, kept) = post::<&str>(
        &format!("http://{}/v3/lease/keepalive", http[2]),
        &json!({"ID": id.to_string()}).to_string(),
        &[],
    );
    assert_eq!(status, 200, "{kept}");
    assert_eq!(i64_of(&kept["result"]["ID"]), id, "{kept}");
    assert_eq!(kept["result"]["TTL"], "30", "{kept}");
    let (_, revoked) = v3(&http[0], "lease/revoke", json!({"ID": id.to_string()}));
    assert!(revoked["header"].is_object(), "{revoked}");
    let (_, gone) = v3(&http[0], "kv/range", json!({"key": key("gw/s")}));
    assert_eq!(gone.get("kvs"), None, "{gone}");

    let (_, status) = v3(&http[1], "maintenance/status", json!({}));
    assert!(status["leader"].is_string(), "{status}");
    let (_, members) = v3(&http[1], "cluster/member/list", json!({}));
    assert_eq!(
        members["members"].as_array().map(Vec::len),
        Some(3),
        "{members}"
    );
    let (code, refused) = v3(&http[0], "kv/put", json!({"key": "", "value": key("v")}));
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("key is not provided"),
        "{refused}"
    );
    let (code, auth) = v3(
        &http[0],
        "auth/authenticate",
        json!({"name": "u", "password": "p"}),
    );
    assert_eq!(code, 501, "{auth}");
    let (code, unknown) = v3(&http[0], "kv/explode", json!({}));
    assert_eq!(code, 404, "{unknown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn etcds_gateway_watch_streams_results_from_a_revision() {
    let (_h, http) = with_http_api().await;
    let key = |k: &str| base64(k.as_bytes());
    let (_, put) = v3(
        &http[0],
        "kv/put",
        json!({"key": key("gw/w"), "value": key("1")}),
    );
    let from = i64_of(&put["header"]["revision"]);
    v3(&http[0], "kv/deleterange", json!({"key": key("gw/w")}));
    let create = json!({"create_request": {"key": key("gw/w"), "start_revision": from.to_string(), "prev_kv": true}});
    let mut curl = Command::new("curl")
        .args(["--silent", "--no-buffer", "--max-time", "20", "-X", "POST"])
        .arg("--data-binary")
        .arg(create.to_string())
        .arg(format!("http://{}/v3/watch", http[1]))
        .stdout(Stdio::piped())
        .spawn()
        .expect("run curl");
    let lines = BufReader::new(curl.stdout.take().unwrap()).lines();
    let mut events = Vec::new();
    let mut created = false;
    for line in lines {
        let response: Value = serde_json::from_str(&line.unwrap()).unwrap();
        created |= response["result"]["created"] == true;
        events.extend(
            response["result"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
        if events.len() >= 2 {
            break;
        }
    }
    let _ = curl.kill();
    let _ = curl.wait();
    assert!(created, "the first answer says the watch was created");
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[0].get("type"),
        None,
        "a PUT, the default, is left out: {events:?}"
    );
    assert_eq!(events[0]["kv"]["value"], key("1"));
    assert_eq!(events[1]["type"], "DELETE", "{events:?}");
    assert_eq!(events[1]["prev_kv"]["value"], key("1"), "{events:?}");
}
