//! `leasehold bench` as a smoke test: every workload runs for a second against a real cluster
//! and reports operations, without errors. Never a timed assertion: speed is the benchmark's
//! output, not a test's pass mark.

mod harness;

use harness::{binary, http_get, sample, with_metrics, Harness};

/// The JSON report of `leasehold bench` with `args` and `more` (two lists, for rustfmt) against
/// `h`'s nodes, once it exited successfully.
fn bench(h: &Harness, args: &[&str], more: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(binary())
        .arg("bench")
        .args(args)
        .args(more)
        .args(["-o", "json", "--endpoints", &h.endpoints.join(",")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench {args:?} {more:?}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_workload_runs_and_reports_json() {
    let h = Harness::start(3, false).await;
    let runs = ["acquire", "renew", "fenced-put", "put", "get", "mixed"]
        .map(|workload| (workload, "1"))
        .into_iter()
        // Many leases renewed in each request.
        .chain([("renew", "64")]);
    for (workload, leases) in runs {
        for connect in ["spread", "leader"] {
            let report = bench(
                &h,
                &["--workload", workload, "--leases", leases, "--clients", "4"],
                &["--duration", "1", "--warmup", "0.2", "--connect", connect],
            );
            assert_eq!(report["workload"], workload, "{report}");
            assert_eq!(report["leases_per_request"].to_string(), leases, "{report}");
            assert!(
                report["ops"].as_u64().unwrap() > 0,
                "{workload} did nothing: {report}"
            );
            assert_eq!(report["errors"], 0, "{workload}: {report}");
            assert!(report["p99_ms"].as_f64().unwrap() >= report["p50_ms"].as_f64().unwrap());
            if workload != "mixed" {
                assert_eq!(report["refused"], 0, "{workload}: {report}");
            }
        }
    }
}

/// The puts each node took from clients, by its metrics.
fn puts_taken(metrics: &[String]) -> Vec<f64> {
    let name = "leasehold_requests_total{rpc=\"put\",outcome=\"ok\"}";
    (metrics.iter())
        .map(|addr| sample(&http_get(addr, "/metrics").unwrap().1, name).unwrap_or(0.0))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_leader_and_follower_send_every_request_to_that_role() {
    let (h, metrics) = with_metrics().await;
    let leader = (h.leader().await - 1) as usize;
    let mut before = puts_taken(&metrics);
    for connect in ["leader", "follower"] {
        let report = bench(
            &h,
            &["--workload", "put", "--clients", "3", "--duration", "0.5"],
            &["--warmup", "0", "--connect", connect],
        );
        assert!(report["ops"].as_u64().unwrap() > 0, "{report}");
        let after = puts_taken(&metrics);
        let took: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        for (node, puts) in took.iter().enumerate() {
            let has_the_role = (node == leader) == (connect == "leader");
            assert_eq!(
                *puts > 0.0,
                has_the_role,
                "{connect}: puts taken per node {took:?}"
            );
        }
        before = after;
    }
}
