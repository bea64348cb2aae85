use super::*;
use std::collections::HashMap;
use std::io::Write;

fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut file = tempfile();
    file.1.write_all(toml.as_bytes()).unwrap();
    let env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let result = Config::load_from(Some(&file.0), &env, Some("node-a"));
    std::fs::remove_file(&file.0).unwrap();
    result
}

fn tempfile() -> (PathBuf, std::fs::File) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "leaderd-config-{}-{}.toml",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::File::create(&path).unwrap();
    (path, file)
}

fn error(toml: &str, env: &[(&str, &str)]) -> String {
    load(toml, env).unwrap_err().to_string()
}

#[test]
fn defaults() {
    let c = load("", &[]).unwrap();
    assert_eq!(c.node.id, "node-a");
    assert_eq!(c.election.name, "default");
    assert_eq!(c.election.ttl, Duration::from_millis(1200));
    assert_eq!(c.election.interval, Duration::from_secs(1));
    assert_eq!(c.database.query_timeout, c.election.ttl);
    assert_eq!(c.database.url.backend(), crate::store::Backend::Sqlite);
    assert_eq!(c.database.url.sqlite_path(), "leaderd.sqlite3");
    assert!(c.database.migrate);
    assert!(c.election.candidate && c.election.health_check.is_none());
}

#[test]
fn observers_and_health_checks() {
    let c = load(
        "[election]\ncandidate = false\n[election.health_check]\ncommand = [\"/bin/check\", \"db\"]\ninterval = \"2s\"\nfailures = 2\n",
        &[],
    )
    .unwrap();
    assert!(!c.election.candidate);
    let check = c.election.health_check.as_ref().unwrap();
    assert_eq!(check.argv, ["/bin/check", "db"]);
    assert_eq!(
        (check.interval, check.failures),
        (Duration::from_secs(2), 2)
    );
    let toml = c.to_toml_redacted();
    assert!(toml.contains("candidate = false"), "{toml}");
    assert!(toml.contains("[election.health_check]"), "{toml}");
    let c = load("", &[("LEADERD_ELECTION__CANDIDATE", "false")]).unwrap();
    assert!(!c.election.candidate);
    let e = error("[election.health_check]\ncommand = \"check\"\n", &[]);
    assert!(e.contains("election.health_check.command"), "{e}");
}

#[test]
fn environment_overrides_file() {
    let c = load(
        "[election]\nttl = \"3s\"\n",
        &[
            ("LEADERD_ELECTION__TTL", "5s"),
            ("LEADERD_DATABASE__MIGRATE", "false"),
            // Hook variables are not configuration.
            ("LEADERD_TERM", "7"),
            ("LEADERD_NODE_ID", "x"),
        ],
    )
    .unwrap();
    assert_eq!(c.election.ttl, Duration::from_secs(5));
    assert!(!c.database.migrate);
    let c = load("", &[("LEADERD_HOOKS__CONTAINMENT", "subreaper")]).unwrap();
    assert_eq!(
        c.hooks.containment,
        crate::hooks::ContainmentMode::Subreaper
    );
}

#[test]
fn unknown_keys_are_named() {
    let e = error("[election]\ntll = \"3s\"\n", &[]);
    assert!(e.contains("`election.tll`"), "{e}");
    assert!(e.contains("did you mean `election.ttl`?"), "{e}");
    // A misspelt section names the variable, and the one meant.
    let e = error("", &[("LEADERD_ELECTON__TTL", "3s")]);
    assert!(e.contains("`electon.ttl`"), "{e}");
    assert!(
        e.contains("from environment variable LEADERD_ELECTON__TTL"),
        "{e}"
    );
    assert!(e.contains("did you mean LEADERD_ELECTION__TTL?"), "{e}");
    let e = error("[nodes]\nid = \"x\"\n", &[]);
    assert!(e.contains("`nodes.id`") && e.contains("`node.id`?"), "{e}");
    // One underscore: not a configuration variable, but close to one.
    let e = error("", &[("LEADERD_DATABASE_URL", "postgres://h/db")]);
    assert!(e.contains("LEADERD_DATABASE_URL"), "{e}");
    assert!(e.contains("did you mean LEADERD_DATABASE__URL?"), "{e}");
    let c = load("", &[("LEADERD_WHATEVER", "1"), ("LEADERD_TERM", "3")]).unwrap();
    assert_eq!(c.unknown_variables, ["LEADERD_WHATEVER"]);
}

#[test]
fn bad_values_name_key_and_value() {
    let e = error("[election]\nttl = \"2x\"\n", &[]);
    assert!(
        e.starts_with("election.ttl = \"2x\": not a duration"),
        "{e}"
    );
    let e = error("[election]\nttl = \"1s\"\n", &[]);
    assert!(
        e.contains("election.ttl = \"1s\": must be greater than election.interval"),
        "{e}"
    );
    let e = error("[database]\nurl = \"redis://localhost\"\n", &[]);
    assert!(
        e.contains("database.url = \"redis://localhost\": unknown scheme \"redis\""),
        "{e}"
    );
    let e = error("[election]\nname = \"\"\n", &[]);
    assert!(e.contains("election.name = \"\": must not be empty"), "{e}");
    let long = "x".repeat(101);
    let e = Config::load_from(None, &HashMap::new(), Some(&long))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is 101 characters long"), "{e}");
    let e = Config::load_from(None, &HashMap::new(), Some(""))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("node.id = \"\": must not be empty"), "{e}");
}

#[test]
fn a_ttl_must_leave_room_for_a_renewal() {
    let e = error("[election]\nttl = \"1003ms\"\n", &[]);
    assert!(
        e.contains("election.ttl = \"1s 3ms\": leaves 3ms after election.interval (1s)"),
        "{e}"
    );
    assert!(load("[election]\nttl = \"1020ms\"\n", &[]).is_ok());
    let e = error("[election]\nttl = \"100years\"\n", &[]);
    assert!(e.contains("must be at most a day"), "{e}");
}

#[test]
fn passwords_are_redacted() {
    let e = error("[database]\nurl = \"ftp://u:s3cret@h/x\"\n", &[]);
    assert!(!e.contains("s3cret"), "{e}");
    let c = load(
        "[database]\nurl = \"mysql://root:s3cret@127.0.0.1/test\"\n",
        &[],
    )
    .unwrap();
    assert!(!c.to_toml_redacted().contains("s3cret"));
}

#[test]
fn pooler_mode() {
    let c = load("[database]\nurl = \"postgres://u@h/x\"\n", &[]).unwrap();
    assert!(!c.database.url.transaction_pooled());
    assert!(c.to_toml_redacted().contains("pooler = \"none\""));
    let c = load(
        "[database]\nurl = \"postgres://u@h/x\"\npooler = \"transaction\"\n",
        &[],
    )
    .unwrap();
    assert!(c.database.url.transaction_pooled());
    assert!(c.to_toml_redacted().contains("pooler = \"transaction\""));
    let c = load("", &[("LEADERD_DATABASE__POOLER", "session")]).unwrap();
    assert!(!c.database.url.transaction_pooled());
    let e = error("[database]\npooler = \"statement\"\n", &[]);
    assert!(
        e.starts_with("database.pooler = \"statement\": expected"),
        "{e}"
    );
    let e = error(
        "[database]\nurl = \"mysql://u:s3cret@h/x\"\npooler = \"transaction\"\n",
        &[],
    );
    assert!(
        e.contains("only PostgreSQL") && !e.contains("s3cret"),
        "{e}"
    );
}

#[test]
fn log_format_from_file_and_environment() {
    assert_eq!(load("", &[]).unwrap().log.format, LogFormat::Text);
    let c = load("[log]\nformat = \"json\"\n", &[]).unwrap();
    assert_eq!(c.log.format, LogFormat::Json);
    assert!(c.to_toml_redacted().contains("format = \"json\""));
    let c = load(
        "[log]\nformat = \"json\"\n",
        &[("LEADERD_LOG__FORMAT", "text")],
    )
    .unwrap();
    assert_eq!(c.log.format, LogFormat::Text);
    let e = error("", &[("LEADERD_LOG__FORMAT", "xml")]);
    assert!(
        e.starts_with("log.format = \"xml\": expected \"text\" or \"json\""),
        "{e}"
    );
}

/// A directory of its own with `files` in it.
fn secrets(files: &[(&str, &str)]) -> PathBuf {
    let (file, _) = tempfile();
    std::fs::remove_file(&file).unwrap();
    let dir = file.with_extension("d");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

#[test]
fn database_secrets_from_files_and_credentials() {
    let dir = secrets(&[
        ("url", "postgres://app:fromfile@db/app\n"),
        ("password", "s3cret\n"),
        ("bad", "postgres://app:s3cret@db:port/app\n"),
        ("database-url", "mysql://app:cred@db/app"),
        ("database-password", "credpw"),
    ]);
    let d = dir.display();
    let c = load(&format!("[database]\nurl_file = \"{d}/url\"\n"), &[]).unwrap();
    assert_eq!(c.database.url.expose(), "postgres://app:fromfile@db/app");
    let c = load(
        &format!("[database]\nurl = \"postgres://app@db/app\"\npassword_file = \"{d}/password\"\n"),
        &[],
    )
    .unwrap();
    assert_eq!(c.database.url.expose(), "postgres://app:s3cret@db/app");
    assert!(!c.to_toml_redacted().contains("s3cret"));
    // systemd credentials, when the configuration names no source.
    let creds = [("CREDENTIALS_DIRECTORY", d.to_string())];
    let creds: Vec<(&str, &str)> = creds.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = load("", &creds).unwrap();
    assert_eq!(c.database.url.expose(), "mysql://app:credpw@db/app");
    let c = load("[database]\nurl = \"postgres://u@h/x\"\n", &creds).unwrap();
    assert_eq!(c.database.url.expose(), "postgres://u:credpw@h/x");
    // The unit's SetCredential= fallback (a lone newline) is no credential at all.
    let empty = secrets(&[("database-url", "\n"), ("database-password", "\n")]);
    let empty = [("CREDENTIALS_DIRECTORY", empty.display().to_string())];
    let empty: Vec<(&str, &str)> = empty.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = load("[database]\nurl = \"postgres://u@h/x\"\n", &empty).unwrap();
    assert_eq!(c.database.url.expose(), "postgres://u@h/x");
    let c = load("", &empty).unwrap();
    assert_eq!(c.database.url.expose(), "sqlite://leaderd.sqlite3");
    std::fs::remove_dir_all(empty[0].1).unwrap();
    // Errors name the key and the file, never the secret.
    let e = error(&format!("[database]\nurl_file = \"{d}/bad\"\n"), &[]);
    assert!(e.starts_with("database.url_file = "), "{e}");
    assert!(e.contains("/bad") && !e.contains("s3cret"), "{e}");
    let e = error(&format!("[database]\npassword_file = \"{d}/none\"\n"), &[]);
    assert!(
        e.contains("database.password_file") && e.contains("/none"),
        "{e}"
    );
    assert!(e.contains("cannot read the file"), "{e}");
    let e = error(
        &format!("[database]\npassword_file = \"{d}/password\"\n"),
        &[],
    );
    assert!(e.contains("sqlite") && !e.contains("s3cret"), "{e}");
    let e = error(
        &format!("[database]\nurl = \"postgres://u:s3cret@h/x\"\nurl_file = \"{d}/url\"\n"),
        &[],
    );
    assert!(
        e.starts_with(&format!(
            "database.url_file = \"{d}/url\": database.url is set too \
             (postgres://u:***@h/x); set one of them"
        )) && !e.contains("s3cret"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn kubernetes_keys_and_downward_api_defaults() {
    let c = load("", &[("POD_NAME", "web-1")]).unwrap();
    assert_eq!(c.kubernetes.role_label, None);
    let c = load(
        "[kubernetes]\nrole_label = \"leaderd.io/role\"\n",
        &[("POD_NAME", "web-1"), ("POD_NAMESPACE", "jobs")],
    )
    .unwrap();
    let k = &c.kubernetes;
    assert_eq!(k.role_label.as_deref(), Some("leaderd.io/role"));
    assert_eq!(k.pod_name.as_deref(), Some("web-1"));
    assert_eq!(k.namespace.as_deref(), Some("jobs"));
    assert!(
        c.to_toml_redacted()
            .contains("role_label = \"leaderd.io/role\"")
    );
    // The keys win over the downward API variables.
    let c = load(
        "[kubernetes]\nrole_label = \"role\"\npod_name = \"p\"\nnamespace = \"n\"\n",
        &[("POD_NAME", "web-1"), ("POD_NAMESPACE", "jobs")],
    )
    .unwrap();
    assert_eq!(c.kubernetes.pod_name.as_deref(), Some("p"));
    assert_eq!(c.kubernetes.namespace.as_deref(), Some("n"));
    let e = error("", &[("LEADERD_KUBERNETES__ROLE_LABEL", "Leaderd.io/role")]);
    assert!(
        e.starts_with("kubernetes.role_label = \"Leaderd.io/role\": not a Kubernetes label key"),
        "{e}"
    );
    let e = error("[kubernetes]\napi_url = \"10.0.0.1:443\"\n", &[]);
    assert!(
        e.starts_with("kubernetes.api_url = \"10.0.0.1:443\""),
        "{e}"
    );
    let e = error("[kubernetes]\nrole = \"x\"\n", &[]);
    assert!(e.contains("`kubernetes.role`"), "{e}");
}

fn load_env(env: &[(&str, &str)]) -> Config {
    let env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::load_from(None, &env, None).unwrap()
}

#[test]
fn hook_variables_stand_in_for_unset_node_id_and_election_name() {
    let c = load_env(&[("LEADERD_NODE_ID", "web-1"), ("LEADERD_ELECTION", "jobs")]);
    assert_eq!(
        (c.node.id.as_str(), c.election.name.as_str()),
        ("web-1", "jobs")
    );
    let variables: Vec<_> = c.env_fallbacks.iter().map(|f| f.variable).collect();
    assert_eq!(variables, ["LEADERD_NODE_ID", "LEADERD_ELECTION"]);
    assert!(c.env_fallbacks.iter().all(|f| !f.from_hook));
    let note = c.env_fallbacks[0].to_string();
    assert!(note.contains("LEADERD_NODE__ID"), "{note}");
    // Under a hook, which set them with the same meaning.
    let c = load_env(&[("LEADERD_NODE_ID", "web-1"), ("LEADERD_EVENT", "elected")]);
    assert_eq!(c.node.id, "web-1");
    assert!(c.env_fallbacks[0].from_hook);
    // The real keys win, and then nothing is noted.
    let c = load_env(&[
        ("LEADERD_NODE_ID", "web-1"),
        ("LEADERD_NODE__ID", "web-2"),
        ("LEADERD_ELECTION", "jobs"),
        ("LEADERD_ELECTION__NAME", "mail"),
    ]);
    assert_eq!(
        (c.node.id.as_str(), c.election.name.as_str()),
        ("web-2", "mail")
    );
    assert!(c.env_fallbacks.is_empty());
    // --id wins too.
    let c = load("", &[("LEADERD_NODE_ID", "web-1")]).unwrap();
    assert_eq!(c.node.id, "node-a");
    assert!(c.env_fallbacks.is_empty());
}

#[test]
fn a_reload_names_the_keys_that_need_a_restart() {
    let old = load("[database]\nurl = \"postgres://u:one@h/x\"\n", &[]).unwrap();
    let same = |toml: &str, env: &[(&str, &str)]| old.needs_restart(&load(toml, env).unwrap());
    let base = "[database]\nurl = \"postgres://u:one@h/x\"\n";
    // What a reload applies: the hooks and the log level.
    assert!(same(base, &[("LEADERD_LOG__LEVEL", "debug")]).is_empty());
    let hooks = format!("{base}[hooks]\non_elected = [\"/bin/true\"]\n");
    assert!(same(&hooks, &[]).is_empty());
    // A rotated password, though the printed form is the same.
    assert_eq!(
        same("[database]\nurl = \"postgres://u:two@h/x\"\n", &[]),
        ["database.url (its password)"]
    );
    assert_eq!(
        same(base, &[("LEADERD_ELECTION__PRIORITY", "3")]),
        ["election.priority"]
    );
    // The query timeout follows the ttl: only the ttl changed.
    assert_eq!(
        same(base, &[("LEADERD_ELECTION__TTL", "2s")]),
        ["election.ttl"]
    );
    assert_eq!(
        same(
            base,
            &[
                ("LEADERD_ELECTION__TTL", "2s"),
                ("LEADERD_DATABASE__QUERY_TIMEOUT", "1s")
            ]
        ),
        ["database.query_timeout", "election.ttl"]
    );
    assert_eq!(
        same(base, &[("LEADERD_HOOKS__CONTAINMENT", "subreaper")]),
        ["hooks.containment"]
    );
}

/// The example configuration loads as shipped, and with each commented-out table taken
/// in (its header and keys uncommented): no key of another table sits below one.
#[test]
fn the_example_config_loads_with_its_commented_tables_taken_in() {
    let example = include_str!("../../config/leaderd.toml");
    let shipped = load(example, &[]).unwrap();
    let mut taken_in = String::new();
    let mut in_table = false;
    for line in example.lines() {
        in_table = (in_table && !line.trim().is_empty()) || line.starts_with("# [");
        let key = line.strip_prefix("# ").filter(|rest| {
            rest.starts_with('[')
                || rest
                    .split_once(" = ")
                    .is_some_and(|(k, _)| !k.contains(' '))
        });
        match key {
            Some(uncommented) if in_table => taken_in.push_str(uncommented),
            _ => taken_in.push_str(line),
        }
        taken_in.push('\n');
    }
    let c = load(&taken_in, &[]).unwrap_or_else(|e| panic!("{e}\n{taken_in}"));
    assert!(c.election.health_check.is_some());
    assert!(c.hooks.leader_command.is_some());
    assert_eq!(c.election.priority, shipped.election.priority);
    assert_eq!(c.election.preempt_after, shipped.election.preempt_after);
}
