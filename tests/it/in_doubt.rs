//! Operator commands whose answer was lost: the command may or may not have been written,
//! which the exit status (8) and the message say, with a way to repeat it harmlessly: a
//! `resign --term N` asks nothing of the leader of a later term.

use crate::support as common;

use common::{
    Backend, Node, NodeSettings, Sampler, TestDb, leaderd, wait_agreed, wait_members,
    wait_new_leader,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use std::process::Output;
use std::time::Duration;

fn run(url: &str, election: &str, args: &[&str]) -> Output {
    leaderd()
        .args(args)
        .env("LEADERD_DATABASE__URL", url)
        .env("LEADERD_ELECTION__NAME", election)
        .env("LEADERD_LOG__LEVEL", "warn")
        .output()
        .unwrap()
}

/// A `resign` whose UPDATE commits and whose wake-up (NOTIFY) then fails, as a reply lost
/// after the commit does: exit 8, "may or may not have been written", naming `resign
/// --term N`. It was written: the leader steps down. Repeated with `--term N`, it asks
/// nothing of the new leader (exit 4), who keeps its term.
#[tokio::test(flavor = "multi_thread")]
async fn a_resign_whose_answer_was_lost_is_in_doubt_and_repeats_harmlessly() {
    let db = TestDb::new(Backend::Postgres);
    let settings = NodeSettings::roomy();
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|id| Node::start(&db, &settings, id, &db.url))
        .collect();
    let all: Vec<&Node> = nodes.iter().collect();
    let mut sampler = Sampler::new();
    let (leader, term) = wait_agreed(&mut sampler, &all).await;
    wait_members(&db, &settings.election, 2).await;

    // A pg_notify of the database's own that fails in the sessions that ask for it (the
    // nodes' sessions, opened before, keep the server's).
    let name = db.url.rsplit('/').next().unwrap().to_owned();
    let mut admin = AsyncPgConnection::establish(&db.url).await.unwrap();
    admin
        .batch_execute(&format!(
            "CREATE FUNCTION public.pg_notify(channel text, payload text) RETURNS void
                 LANGUAGE plpgsql AS $$
             BEGIN
                 IF current_setting('leaderd_test.lose_answer', true) = 'on' THEN
                     RAISE EXCEPTION 'the answer was lost';
                 END IF;
                 PERFORM pg_catalog.pg_notify(channel, payload);
             END $$;
             ALTER DATABASE {name} SET search_path = public, pg_catalog;"
        ))
        .await
        .unwrap();
    let losing = format!("{}?options=-c%20leaderd_test.lose_answer%3Don", db.url);

    let lost = run(&losing, &settings.election, &["resign", "--wait", "1s"]);
    let stderr = String::from_utf8_lossy(&lost.stderr);
    assert_eq!(lost.status.code(), Some(8), "{stderr}");
    assert!(
        stderr.contains("may or may not have been written")
            && stderr.contains(&format!("leaderd resign --term {term}")),
        "{stderr}"
    );

    // It was written: the leader steps down, the other node takes over.
    let (new, next) = wait_new_leader(&mut sampler, &all, term).await;
    assert_ne!(new, leader);

    let again = run(
        &db.url,
        &settings.election,
        &["resign", "--term", &term.to_string()],
    );
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("nothing was asked"), "{stderr}");
    sampler.watch(&all, Duration::from_secs(2)).await;
    assert_eq!(
        common::agreed_leader(&sampler.sample(&all)),
        Some((new, next)),
        "the new leader keeps its term"
    );
}
