//! Stepping down: a leader whose leader_command exits resigns, a resign runs the whole
//! step-down before the release, and a node told to stop never claims again.

use super::*;

/// With step_down_on_exit, a leader whose leader_command exits gives up leadership and
/// another node takes over.
#[tokio::test(flavor = "multi_thread")]
async fn step_down_on_exit_hands_leadership_over() {
    let db = TestDb::new(Backend::Postgres);
    let settings = hooks_config(
        &db,
        r#"
[hooks.leader_command]
command = ["sh", "-c", "sleep 1"]
step_down_on_exit = true
"#,
    );
    let nodes = [
        start(&db, &settings, "a", &db.url),
        start(&db, &settings, "b", &db.url),
    ];
    let mut sampler = Sampler::new();
    let (first, term) = wait_agreed(&mut sampler, &alive(&nodes)).await;
    // Who holds the next term (the nodes need not agree on it for long: its own
    // leader_command exits a second later too, and the resigned node polls once a second).
    let next_leader = |statuses: &[Option<StatusFile>]| {
        statuses
            .iter()
            .flatten()
            .find(|s| s.is_leader() && s.term > Some(term))
            .map(|s| s.node_id.clone())
    };
    let (statuses, _) = sampler
        .until(&alive(&nodes), SETTLE, "the next term begins", |s| {
            next_leader(s).is_some()
        })
        .await;
    assert_ne!(
        Some(first),
        next_leader(&statuses),
        "the other node took over"
    );
    sampler.check_terms();
}

/// A resign (step_down_on_exit) goes through the whole step-down before the release: the
/// resigning node's on_demoted has finished before the next term's on_elected starts,
/// although a PostgreSQL successor claims within milliseconds of a release.
#[tokio::test(flavor = "multi_thread")]
async fn a_resign_runs_on_demoted_before_anyone_else_is_elected() {
    let db = TestDb::new(Backend::Postgres);
    let settings = hooks_config(
        &db,
        r#"
on_elected = ["RECORD", "elected"]
on_demoted = ["sh", "-c", "sleep 0.3; RECORD demoted"]
[hooks.leader_command]
command = ["sh", "-c", "sleep 0.5"]
step_down_on_exit = true
"#,
    );
    let nodes = [
        start(&db, &settings, "a", &db.url),
        start(&db, &settings, "b", &db.url),
    ];
    let mut sampler = Sampler::new();
    sampler
        .until(&alive(&nodes), SETTLE, "three terms have begun", |_| {
            records(&db.dir)
                .iter()
                .filter(|r| r.event == "elected")
                .count()
                >= 3
        })
        .await;
    let records = records(&db.dir);
    let at = |event: &str, term: i64| {
        records
            .iter()
            .find(|r| r.event == event && r.term == term)
            .map(|r| r.at)
    };
    let mut elected: Vec<i64> = records
        .iter()
        .filter(|r| r.event == "elected")
        .map(|r| r.term)
        .collect();
    elected.sort();
    for pair in elected[..3].windows(2) {
        let (term, next_term) = (pair[0], pair[1]);
        let demoted = at("demoted", term).expect("on_demoted ran for every resigned term");
        let next = at("elected", next_term).unwrap();
        assert!(
            demoted < next,
            "term {next_term}'s on_elected began {} ms before term {term}'s on_demoted ended: {records:#?}",
            (demoted - next) / 1_000_000
        );
    }
    sampler.check_terms();
}

/// A node told to stop never claims again. Its leader_command ignores SIGTERM, so it
/// steps down slowly; meanwhile its database link stalls past its deadline (it demotes)
/// and comes back while its on_demoted still runs: the lease it held must not be taken
/// anew.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopping_node_whose_link_comes_back_takes_no_new_term() {
    let db = TestDb::new(Backend::Postgres);
    let proxy = Proxy::start(db.server_addr()).await;
    let settings = hooks_config(
        &db,
        r#"
shutdown_timeout = "6s"
on_demoted = ["sleep", "2"]
[hooks.leader_command]
command = ["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"]
stop_timeout = "4s"
"#,
    );
    let mut node = start(&db, &settings, "a", &db.url_via(proxy.addr));
    let mut sampler = Sampler::new();
    let (_, term) = wait_agreed(&mut sampler, &[&node]).await;
    node.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(Mode::Stall);
    sampler
        .until(&[&node], SETTLE, "the stopping node demotes", |s| {
            s[0].as_ref().is_some_and(|s| !s.is_leader())
        })
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    proxy.set(Mode::Pass);
    // It may not lead again meanwhile, and no new term may have begun once it is gone.
    let limit = std::time::Instant::now() + Duration::from_secs(12);
    while node.try_exit().is_none() {
        assert!(std::time::Instant::now() < limit, "the node did not exit");
        let statuses = sampler.sample(&[&node]);
        assert!(
            !statuses[0].as_ref().is_some_and(StatusFile::is_leader),
            "a stopping node leads again: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        status_json(&db, &settings.election)["term"].as_i64(),
        Some(term),
        "the stopping node began a new term"
    );
}

/// A stop that comes while a resign's on_demoted runs lets that on_demoted finish: it is
/// the step-down's own last act, bounded by its timeout, not leader work to stop.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_during_a_resign_lets_its_on_demoted_finish() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = hooks_config(
        &db,
        r#"
on_demoted = ["sh", "-c", "RECORD demoting; sleep 1; RECORD demoted"]
shutdown_timeout = "5s"
[hooks.leader_command]
command = ["sh", "-c", "sleep 0.3"]
step_down_on_exit = true
"#,
    );
    let mut node = start(&db, &settings, "a", &db.url);
    let mut sampler = Sampler::new();
    sampler
        .until(&[&node], SETTLE, "the resign's on_demoted starts", |_| {
            records(&db.dir).iter().any(|r| r.event == "demoting")
        })
        .await;
    node.signal(Signal::SIGTERM);
    assert!(node.wait_exit(SETTLE).await.is_some());
    let records = records(&db.dir);
    assert!(
        records.iter().any(|r| r.event == "demoted"),
        "the stop cut the resign's on_demoted short: {records:?}"
    );
}
