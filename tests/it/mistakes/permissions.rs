//! A read-only monitoring role (SELECT on `service_leader_lock`, as the docs said was
//! enough) got "the table service_leader_lock has no column leaderd_member … run `leaderd
//! migrate`": the server's "permission denied for table leaderd_member" named the table,
//! and was read as a column to migrate. A refused privilege is said as such now.

use super::text;
use crate::support::{Backend, TestDb, leaderd, unique};

fn sql(backend: Backend, database: &str, statement: &str) {
    let mut command = match backend {
        Backend::Postgres => {
            let mut c = std::process::Command::new("psql");
            c.args(["-h", "127.0.0.1", "-U", "postgres", "-d", database, "-qAtc"]);
            c
        }
        _ => {
            let mut c = std::process::Command::new("mysql");
            c.args(["-h", "127.0.0.1", "-u", "root", database, "-e"]);
            c
        }
    };
    let output = command.arg(statement).output().unwrap();
    assert!(output.status.success(), "{statement}: {output:?}");
}

async fn a_monitoring_role_is_told_which_privilege_it_lacks(backend: Backend) {
    let db = TestDb::new(backend);
    let database = db.url.rsplit('/').next().unwrap().to_owned();
    let election = unique("watched");
    let locked = leaderd()
        .args(["lock", "--election-row", &election, "--", "true"])
        .env("LEADERD_DATABASE__URL", &db.url)
        .output()
        .unwrap();
    assert!(locked.status.success(), "{locked:?}");
    let role = unique("monitor");
    let (create, grant_members, drop, url) = match backend {
        Backend::Postgres => (
            format!("CREATE ROLE {role} LOGIN; GRANT SELECT ON service_leader_lock TO {role}"),
            format!("GRANT SELECT ON leaderd_member TO {role}"),
            format!("DROP OWNED BY {role}; DROP ROLE {role}"),
            db.url
                .replace("postgres://postgres@", &format!("postgres://{role}@")),
        ),
        _ => (
            format!(
                "CREATE USER '{role}'@'%'; \
                 GRANT SELECT ON {database}.service_leader_lock TO '{role}'@'%'"
            ),
            format!("GRANT SELECT ON {database}.leaderd_member TO '{role}'@'%'"),
            format!("DROP USER '{role}'@'%'"),
            // Plain text asked for: no "not encrypted" warning in the way.
            db.url.replace("mysql://root@", &format!("mysql://{role}@")) + "?ssl-mode=DISABLED",
        ),
    };
    sql(backend, &database, &create);
    let status = || {
        text(
            &leaderd()
                .args(["status", "--json"])
                .env("LEADERD_DATABASE__URL", &url)
                .env("LEADERD_ELECTION__NAME", &election)
                .output()
                .unwrap(),
        )
    };
    let without = status();
    sql(backend, &database, &grant_members);
    let with = status();
    sql(backend, &database, &drop);
    let (code, stdout, stderr) = without;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("leaderd_member")
            && stderr.contains("lacks a privilege")
            && !stderr.contains("migrate"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(report["members"].is_null(), "{report}");
    let (code, stdout, stderr) = with;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("privilege"), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(report["members"].is_array(), "{report}");
}

backend_tests!(postgres = Backend::Postgres => a_monitoring_role_is_told_which_privilege_it_lacks);
backend_tests!(mysql = Backend::Mysql => a_monitoring_role_is_told_which_privilege_it_lacks);
