use super::*;

fn parse(toml: &str) -> Result<HooksConfig, HookConfigError> {
    let mut file: toml::Table = toml.parse().unwrap();
    HooksConfig::parse(&file.remove("hooks").unwrap())
}

const BOTH_FORMS: &str = r#"
[hooks]
on_elected = ["/bin/elected", "--now"]
shutdown_timeout = "20s"
[hooks.on_demoted]
command = ["sh", "-c", "echo bye"]
timeout = "5s"
env = { MODE = "drain" }
[hooks.leader_command]
command = ["/usr/bin/worker"]
restart = "always"
step_down_on_exit = true
"#;

#[test]
fn argv_and_table_forms() {
    let hooks = parse(BOTH_FORMS).unwrap();
    let elected = hooks.on_elected.unwrap();
    assert_eq!(elected.argv, ["/bin/elected", "--now"]);
    assert_eq!(elected.timeout, DEFAULT_HOOK_TIMEOUT);
    let demoted = hooks.on_demoted.unwrap();
    assert_eq!(demoted.timeout, Duration::from_secs(5));
    assert_eq!(demoted.env["MODE"], "drain");
    let command = hooks.leader_command.unwrap();
    assert_eq!(
        (command.restart, command.step_down_on_exit),
        (Restart::Always, true)
    );
    assert_eq!(command.stop_timeout, DEFAULT_STOP_TIMEOUT);
    assert_eq!(hooks.shutdown_timeout, Duration::from_secs(20));
    assert!(hooks.while_leader.is_none());
    assert_eq!(hooks.containment, ContainmentMode::Auto);
    let hooks = parse("[hooks]\ncontainment = \"subreaper\"\n").unwrap();
    assert_eq!(hooks.containment, ContainmentMode::Subreaper);
}

#[test]
fn the_written_section_reads_back_the_same() {
    let others = "[hooks]\nwhile_leader = [\"/bin/tick\"]\ncontainment = \"subreaper\"\n\
                  [hooks.leader_command]\ncommand = [\"/bin/w\"]\nrestart = \"never\"\n";
    for section in [BOTH_FORMS, others] {
        let hooks = parse(section).unwrap();
        let mut file = toml::Table::new();
        file.insert("hooks".into(), toml::Value::Table(hooks.to_toml()));
        let written = toml::to_string(&file).unwrap();
        assert_eq!(parse(&written).unwrap(), hooks, "{written}");
    }
}

#[test]
fn mistakes_name_the_key() {
    let e = parse("[hooks]\non_elected = \"/bin/elected --now\"\n").unwrap_err();
    assert!(e.to_string().starts_with("hooks.on_elected = "), "{e}");
    assert!(e.to_string().contains("argv array"), "{e}");
    let e = parse("[hooks.on_demoted]\ncommand = [\"x\"]\ntimout = \"5s\"\n").unwrap_err();
    assert!(
        e.to_string().starts_with("hooks.on_demoted.timout = "),
        "{e}"
    );
    let e =
        parse("[hooks.leader_command]\ncommand = [\"x\"]\nrestart = \"sometimes\"\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("\"on-failure\", \"always\" or \"never\""),
        "{e}"
    );
    let e = parse("[hooks.while_leader]\ncommand = []\n").unwrap_err();
    assert!(e.to_string().contains("needs at least a program"), "{e}");
    let e = parse("[hooks]\ncontainment = \"cgroups\"\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("hooks.containment = \"cgroups\": must be \"auto\""),
        "{e}"
    );
    let e = parse("[hooks.on_elected]\ncommand = [\"x\"]\ntimeout = \"soon\"\n").unwrap_err();
    assert!(
        e.to_string().starts_with("hooks.on_elected.timeout = "),
        "{e}"
    );
}
