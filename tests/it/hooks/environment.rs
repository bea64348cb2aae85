//! What a hook's environment holds, and what it never does.

use super::*;

/// No `LEADERD_<SECTION>__<KEY>` variable (the database URL with its password among them)
/// reaches a hook, whether it started through a guard of its own (on_elected) or one started
/// ahead of time (leader_command): only the event variables, the hook's own `env` and the
/// rest of leaderd's environment.
#[tokio::test(flavor = "multi_thread")]
async fn hooks_never_see_leaderds_configuration_variables() {
    let db = TestDb::new(Backend::Postgres);
    let url = db.url.replace("postgres@", "postgres:hunter2@");
    let settings = hooks_config(
        &db,
        r#"
on_elected = ["sh", "-c", "env > DIR/elected.tmp && mv DIR/elected.tmp DIR/elected.env"]
[hooks.leader_command]
command = ["sh", "-c", "env > DIR/command.tmp && mv DIR/command.tmp DIR/command.env; exec sleep 60"]
env = { HOOK_OWN = "yes" }
"#,
    );
    let node = Node::start_with_env(
        &db,
        &settings,
        "env-node",
        &url,
        &[
            ("RECORD_DIR", db.dir.to_str().unwrap()),
            ("LEADERD_LOG__LEVEL", "debug"),
        ],
    );
    for (name, own) in [("elected.env", false), ("command.env", true)] {
        let env = env_dump(&db.dir.join(name)).await;
        let node_term = node.status().and_then(|s| s.term);
        let leaked: Vec<&String> = env
            .keys()
            .filter(|k| k.starts_with("LEADERD_") && k.contains("__"))
            .collect();
        assert!(leaked.is_empty(), "{name}: {leaked:?}");
        assert!(
            !env.values().any(|v| v.contains("hunter2")),
            "{name}: {env:?}"
        );
        assert_eq!(env["LEADERD_NODE_ID"], "env-node", "{name}");
        assert_eq!(env["LEADERD_ELECTION"], settings.election, "{name}");
        let term: i64 = env["LEADERD_TERM"].parse().unwrap();
        assert_eq!(Some(term), node_term, "{name}");
        assert_eq!(env["LEADERD_ROLE"], "leader", "{name}");
        assert_eq!(env["RECORD_DIR"], db.dir.to_str().unwrap(), "{name}");
        assert_eq!(
            env.get("HOOK_OWN").map(String::as_str),
            own.then_some("yes")
        );
    }
    drop(node);
}

/// `on_demoted` runs once this node no longer leads: `LEADERD_LEADER` is empty (the next
/// leader is not known yet), not this node, and `LEADERD_PREVIOUS_LEADER` is this node.
#[tokio::test(flavor = "multi_thread")]
async fn on_demoted_is_not_told_that_this_node_leads() {
    let db = TestDb::new(Backend::Sqlite);
    let settings = hooks_config(
        &db,
        r#"
on_elected = ["sh", "-c", "env > DIR/elected.tmp && mv DIR/elected.tmp DIR/elected.env"]
on_demoted = ["sh", "-c", "env > DIR/demoted.tmp && mv DIR/demoted.tmp DIR/demoted.env"]
"#,
    );
    let node = start(&db, &settings, "demoted-node", &db.url);
    let elected = env_dump(&db.dir.join("elected.env")).await;
    assert_eq!(elected["LEADERD_LEADER"], "demoted-node");
    node.signal(nix::sys::signal::Signal::SIGTERM);
    let demoted = env_dump(&db.dir.join("demoted.env")).await;
    assert_eq!(demoted["LEADERD_EVENT"], "demoted");
    assert_eq!(demoted["LEADERD_LEADER"], "", "{demoted:?}");
    assert_eq!(demoted["LEADERD_PREVIOUS_LEADER"], "demoted-node");
    assert_eq!(demoted["LEADERD_TERM"], elected["LEADERD_TERM"]);
}
