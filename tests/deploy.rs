//! The packaging: the Kubernetes manifests parse and describe what the README promises, the
//! command line in them is one `serve` accepts, and the Dockerfile builds in one stage and runs
//! as a non-root user in a small one.

mod harness;

use std::path::PathBuf;
use std::time::Duration;

use yaml_rust2::{Yaml, YamlLoader};

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// Every document of every manifest in deploy/k8s.
fn manifests() -> Vec<Yaml> {
    let mut docs = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy().join("k8s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let parsed = YamlLoader::load_from_str(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        docs.extend(parsed);
    }
    docs
}

fn find<'a>(docs: &'a [Yaml], kind: &str, name: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn statefulset_container(docs: &[Yaml]) -> &Yaml {
    &find(docs, "StatefulSet", "leasehold")["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn the_manifests_run_three_nodes_behind_a_headless_peer_service_with_a_budget_of_one() {
    let docs = manifests();
    let set = find(&docs, "StatefulSet", "leasehold");
    assert_eq!(set["spec"]["replicas"].as_i64(), Some(3));
    assert_eq!(set["spec"]["serviceName"].as_str(), Some("leasehold-peers"));
    let claim = &set["spec"]["volumeClaimTemplates"][0];
    assert_eq!(claim["metadata"]["name"].as_str(), Some("data"));
    let container = statefulset_container(&docs);
    assert_eq!(
        container["volumeMounts"][0]["mountPath"].as_str(),
        Some("/var/lib/leasehold")
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    let security = &set["spec"]["template"]["spec"]["securityContext"];
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true));

    let peers = find(&docs, "Service", "leasehold-peers");
    assert_eq!(
        peers["spec"]["clusterIP"].as_str(),
        Some("None"),
        "headless"
    );
    assert_eq!(
        peers["spec"]["publishNotReadyAddresses"].as_bool(),
        Some(true)
    );
    let client = find(&docs, "Service", "leasehold");
    assert_eq!(client["spec"]["ports"][0]["port"].as_i64(), Some(7001));
    let budget = find(&docs, "PodDisruptionBudget", "leasehold");
    assert_eq!(budget["spec"]["maxUnavailable"].as_i64(), Some(1));
}

#[test]
fn the_statefulsets_command_line_is_one_serve_accepts_for_every_pod() {
    let docs = manifests();
    let container = statefulset_container(&docs);
    let args: Vec<&str> = container["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for ordinal in 0..3 {
        let pod = format!("leasehold-{ordinal}");
        // Kubernetes expands $(VAR) from the container's environment.
        let expanded: Vec<String> = args
            .iter()
            .map(|a| {
                a.replace("$(POD_NAME)", &pod)
                    .replace("$(POD_NAMESPACE)", "default")
            })
            .collect();
        let out = std::process::Command::new(harness::binary())
            .args(&expanded)
            .arg("--check-config")
            .env("HOSTNAME", &pod)
            .env_remove("LEASEHOLD_ID")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{expanded:?}: {out:?}");
        assert!(
            stdout.contains(&format!("id {}\n", ordinal + 1)),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("advertise {pod}.leasehold-peers.default.svc:7001")),
            "{stdout}"
        );
        // Every peer's address is the stable name of the pod that is that node.
        for id in 1..=3 {
            let name = format!("{id}=leasehold-{}.leasehold-peers:7101", id - 1);
            assert!(stdout.contains(&name), "{name} in {stdout}");
        }
    }
    // The probes ask the port --metrics-listen serves.
    assert!(args.contains(&"--metrics-listen=0.0.0.0:9100"));
    let ports = container["ports"].as_vec().unwrap();
    let metrics = ports
        .iter()
        .find(|p| p["name"].as_str() == Some("metrics"))
        .unwrap();
    assert_eq!(metrics["containerPort"].as_i64(), Some(9100));
}

#[test]
fn serve_refuses_a_host_name_that_names_no_ordinal_and_a_bad_address() {
    let serve = |args: &[&str], host: &str| {
        std::process::Command::new(harness::binary())
            .arg("serve")
            .args(args)
            .arg("--check-config")
            .env("HOSTNAME", host)
            .output()
            .unwrap()
    };
    let base = [
        "--listen=0.0.0.0:7001",
        "--peer-listen=0.0.0.0:7101",
        "--data-dir=/tmp/x",
        "--peers=1=a:7101,2=b:7101,3=c:7101",
    ];
    let mut args = base.to_vec();
    args.push("--id-from-hostname");
    let out = serve(&args, "laptop");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--id-from-hostname"),
        "{out:?}"
    );
    let out = serve(&args, "leasehold-7");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("own id 8"),
        "{out:?}"
    );
    let mut args = base.to_vec();
    args[0] = "--listen=0.0.0.0";
    args.push("--id=1");
    let out = serve(&args, "x");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no port"),
        "{out:?}"
    );
}

#[test]
fn the_dockerfile_builds_in_one_stage_and_runs_as_a_non_root_user_in_another() {
    let text = std::fs::read_to_string(deploy().join("Dockerfile")).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let froms: Vec<&&str> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "two stages: {froms:?}");
    assert!(froms[0].ends_with(" AS build"), "{froms:?}");
    let runtime = lines
        .iter()
        .position(|l| l.starts_with("FROM ") && !l.ends_with(" AS build"))
        .unwrap();
    let last: &[&str] = &lines[runtime..];
    assert!(last.iter().any(|l| l.starts_with("COPY --from=build ")));
    let user = last.iter().find_map(|l| l.strip_prefix("USER ")).unwrap();
    let uid: u32 = user.split(':').next().unwrap().parse().unwrap();
    assert_ne!(uid, 0, "runs as root");
    assert!(last
        .iter()
        .any(|l| l.starts_with("ENTRYPOINT ") && l.contains("leasehold")));
    assert!(lines
        .iter()
        .any(|l| l.contains("cargo build --release --locked")));
}

/// Every `leasehold_*` series name in `text`.
fn series_named(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for (at, _) in text.match_indices("leasehold_") {
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        names.insert(name);
    }
    names
}

/// The dashboard's queries, each with the panel it belongs to.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy().join("grafana/leasehold.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut queries = Vec::new();
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let title = panel["title"].as_str().unwrap().to_owned();
            queries.push((title, target["expr"].as_str().unwrap().to_owned()));
        }
    }
    queries
}

/// Runs `promtool check rules FILE` (Debian's prometheus package, which `.ci/run` installs).
fn promtool_check_rules(file: &std::path::Path) {
    let run = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(file)
        .output()
        .expect("promtool (Debian's prometheus package; .ci/run installs it)");
    assert!(
        run.status.success(),
        "promtool check rules {}:\n{}{}",
        file.display(),
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// The alert rules pass promtool, and so do the dashboard's queries, each written as a
/// recording rule (promtool parses its PromQL as Prometheus would).
#[test]
fn the_alert_rules_and_the_dashboards_queries_pass_promtool() {
    promtool_check_rules(&deploy().join("prometheus/alerts.yml"));
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (n, (_, expr)) in dashboard_queries().iter().enumerate() {
        let expr = serde_json::to_string(expr).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard:query_{n}\n        expr: {expr}\n"
        ));
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), rules).unwrap();
    promtool_check_rules(file.path());
}

/// Every series the alert rules and the dashboard name is one a live node serves on /metrics.
#[tokio::test(flavor = "multi_thread")]
async fn every_series_the_alerts_and_the_dashboard_name_is_served_by_a_live_node() {
    let (_h, addrs) = harness::with_metrics().await;
    let (_, text) = harness::http_get(&addrs[0], "/metrics").unwrap();
    // The health rows' own series say what they mean on a node that serves.
    let (free, size) = (
        harness::sample(&text, "leasehold_disk_free_bytes").unwrap(),
        harness::sample(&text, "leasehold_disk_size_bytes").unwrap(),
    );
    assert!(0.0 < free && free <= size, "free {free} of {size}");
    let ready = harness::wait_for("node 1 to be ready", Duration::from_secs(10), || async {
        let (_, text) = harness::http_get(&addrs[0], "/metrics").ok()?;
        (harness::sample(&text, "leasehold_ready") == Some(1.0)).then_some(())
    });
    ready.await;
    let served = series_named(&text);
    let alerts = std::fs::read_to_string(deploy().join("prometheus/alerts.yml")).unwrap();
    let queries: Vec<String> = dashboard_queries().into_iter().map(|(_, q)| q).collect();
    let named = series_named(&format!("{alerts}\n{}", queries.join("\n")));
    assert!(named.len() >= 10, "{named:?}");
    let missing: Vec<&String> = named.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "not on a node's /metrics: {missing:?}\nserved: {served:?}"
    );
}
