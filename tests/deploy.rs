//! The packaging: the Kubernetes manifests parse and describe what the README promises, the
//! command line in them is one `serve` accepts, and the Dockerfile builds in one stage and runs
//! as a non-root user in a small one.

mod harness;

use std::path::PathBuf;

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
