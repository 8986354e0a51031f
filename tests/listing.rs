//! Listing by prefix (`ListLeases`, `ListKeys`) on a real three-node cluster: pages in name
//! order that continue where the last one ended, across writes; serializable reads on a
//! follower; bad pages refused naming the field and the limit; the CLI's `leases` and `keys`.

mod harness;

use harness::{cli, granted, Harness};
use leasehold_client::{ClientError, Code, LeaseClient, LeaseState, Listing};

/// Every entry of the leases under `prefix`, page by page of `limit`, with each page's size.
async fn all_leases(
    c: &LeaseClient,
    prefix: &str,
    limit: u32,
) -> (Vec<(String, LeaseState)>, Vec<usize>) {
    let mut listing = Listing {
        limit,
        ..Listing::under(prefix)
    };
    let (mut entries, mut pages) = (Vec::new(), Vec::new());
    loop {
        let page = c.list_leases(&listing).await.unwrap().outcome;
        pages.push(page.entries.len());
        entries.extend(page.entries);
        match page.next {
            Some(next) => listing.page_token = next,
            None => return (entries, pages),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_and_keys_list_by_prefix_in_name_order_a_page_at_a_time() {
    let h = Harness::start(3, false).await;
    let c = &h.client;
    for i in 0..250 {
        let name = format!("jobs/{i:03}");
        c.acquire(&name, "w", 60_000).await.unwrap();
        if i % 10 == 0 {
            c.put(&name, name.as_bytes(), None).await.unwrap();
        }
    }
    for other in ["jobs", "jobsx/1", "other/1"] {
        c.acquire(other, "w", 60_000).await.unwrap();
    }
    let released = granted(&c.acquire("jobs/free", "w", 60_000).await.unwrap()).unwrap();
    c.release("jobs/free", "w", released).await.unwrap();

    let (leases, pages) = all_leases(c, "jobs/", 100).await;
    assert_eq!(pages, [100, 100, 51]);
    let names: Vec<&str> = leases.iter().map(|(name, _)| name.as_str()).collect();
    let mut expected: Vec<String> = (0..250).map(|i| format!("jobs/{i:03}")).collect();
    expected.push("jobs/free".into());
    assert_eq!(names, expected);
    let (held, free) = (&leases[0].1, &leases[250].1);
    assert_eq!((held.holder.as_deref(), held.token), (Some("w"), 1));
    assert_eq!((free.holder.as_deref(), free.token), (None, released));

    // A listing goes on across writes: what was written after its last name is on the next page.
    let first = c
        .list_leases(&Listing {
            limit: 10,
            ..Listing::under("jobs/")
        })
        .await
        .unwrap();
    c.acquire("jobs/0095", "w", 60_000).await.unwrap();
    let next = Listing {
        page_token: first.outcome.next.clone().unwrap(),
        limit: 1,
        ..Listing::under("jobs/")
    };
    let second = c.list_leases(&next).await.unwrap().outcome;
    assert_eq!(second.entries[0].0, "jobs/0095");

    let keys = c
        .list_keys(&Listing::under("jobs/1"))
        .await
        .unwrap()
        .outcome;
    let rows: Vec<(&str, &[u8])> = (keys.entries.iter())
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let expected: Vec<(String, String)> = (10..20)
        .map(|i| (format!("jobs/{:03}", i * 10), format!("jobs/{:03}", i * 10)))
        .collect();
    let expected: Vec<(&str, &[u8])> = (expected.iter())
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    assert_eq!((rows, keys.next), (expected, None));

    // A follower answers a serializable listing from its own applied state.
    let leader = h.leader().await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let serializable = Listing {
        serializable: true,
        ..Listing::under("other/")
    };
    let wanted = "other/1".to_owned();
    let seen = harness::wait_for(
        "the follower to apply",
        std::time::Duration::from_secs(5),
        || async {
            let page = h
                .client_of(follower)
                .list_leases(&serializable)
                .await
                .ok()?;
            (page.outcome.entries.iter().map(|(n, _)| n).eq([&wanted])).then_some(page)
        },
    )
    .await;
    assert!(seen.applied.log_index > 0);
}

fn assert_invalid<T: std::fmt::Debug>(result: Result<T, ClientError>, naming: &[&str]) {
    let error = result.expect_err("refused");
    assert_eq!(error.code(), Code::InvalidArgument, "{error}");
    for part in naming {
        assert!(
            error.to_string().contains(part),
            "{error} should name {part}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_page_is_refused_naming_the_field_and_its_limit_and_the_cli_lists() {
    let h = Harness::start(3, false).await;
    let c = &h.client;
    let too_many = Listing {
        limit: 1_001,
        ..Listing::under("a/")
    };
    assert_invalid(
        c.list_leases(&too_many).await,
        &["page.limit", "1000", "1001"],
    );
    let elsewhere = Listing {
        page_token: "b/1".into(),
        ..Listing::under("a/")
    };
    assert_invalid(
        c.list_keys(&elsewhere).await,
        &["page.page_token", "\"a/\""],
    );
    let long = Listing::under(&"x".repeat(129));
    assert_invalid(c.list_leases(&long).await, &["page.prefix", "128 bytes"]);

    c.acquire("cli/a", "w1", 60_000).await.unwrap();
    c.acquire("cli/b", "w2", 60_000).await.unwrap();
    c.put("cli/k", b"v", None).await.unwrap();
    let out = cli(&h.endpoints, &["-o", "json", "leases", "--prefix", "cli/"]);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<serde_json::Value> = (String::from_utf8(out.stdout).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        (lines[0]["lease"].as_str(), lines[0]["holder"].as_str()),
        (Some("cli/a"), Some("w1"))
    );
    assert_eq!(lines[1]["token"], 1);
    let out = cli(
        &h.endpoints,
        &["leases", "--prefix", "cli/", "--limit", "1"],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("cli/a") && text.contains("w1") && !text.contains("cli/b"),
        "{text}"
    );
    let out = cli(&h.endpoints, &["keys", "--prefix", "cli/"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "cli/k\tv\n");
    let out = cli(&h.endpoints, &["leases", "--prefix", "none/"]);
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("(no leases)"));
}
