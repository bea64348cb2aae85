//! The `[hooks]` section: what to run on which event, parsed with errors that name the key,
//! and written back as TOML for `leaderd check-config`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::containment::ContainmentMode;
use super::kind::HookKind;

/// Bound on one event hook (or one `while_leader` run) unless it sets `timeout`.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// Time a `leader_command` gets between SIGTERM and SIGKILL on a clean step-down.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on stopping hooks and running `on_demoted` before a stopping node releases.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The keys of `[hooks]`: one per [`HookKind`], and the settings.
pub const HOOK_KEYS: &[&str] = &[
    HookKind::OnElected.as_str(),
    HookKind::OnDemoted.as_str(),
    HookKind::OnLeaderChange.as_str(),
    HookKind::WhileLeader.as_str(),
    HookKind::LeaderCommand.as_str(),
    "shutdown_timeout",
    "containment",
    "on_elected_failure",
];

#[derive(Debug, thiserror::Error)]
#[error("{key} = {value}: {reason}")]
pub struct HookConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

pub(super) fn error(key: &str, value: &toml::Value, reason: impl Into<String>) -> HookConfigError {
    HookConfigError {
        key: key.to_owned(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// One program to run: argv (no shell), its bound, and extra environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCommand {
    pub argv: Vec<String>,
    pub timeout: Duration,
    pub env: BTreeMap<String, String>,
}

/// When a `leader_command` that exited is started again (while still leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    OnFailure,
    Always,
    Never,
}

impl Restart {
    pub const CHOICES: &str = "\"on-failure\", \"always\" or \"never\"";

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "on-failure" => Some(Restart::OnFailure),
            "always" => Some(Restart::Always),
            "never" => Some(Restart::Never),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Restart::OnFailure => "on-failure",
            Restart::Always => "always",
            Restart::Never => "never",
        }
    }
}

/// What a leader does when its `on_elected` fails (exits non-zero, times out, cannot
/// start): `hooks.on_elected_failure`.
///
/// The default is `StepDown`, as keepalived goes to FAULT when a notify script fails: the
/// hook is the leader's preparation (take the address, promote the replica), and a leader
/// that skipped it would run `leader_command` and serve as leader without it. Stepping
/// down hands the lead to a node whose preparation works (this node claims nothing for
/// one ttl); on a single node, it retries the hook each time it is elected again.
/// `Ignore` keeps the lead, logs the failure, and starts `leader_command` anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ElectedFailure {
    Ignore,
    #[default]
    StepDown,
}

impl ElectedFailure {
    pub const CHOICES: &str = "\"step_down\" (the default) or \"ignore\"";

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ignore" => Some(ElectedFailure::Ignore),
            "step_down" => Some(ElectedFailure::StepDown),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ElectedFailure::Ignore => "ignore",
            ElectedFailure::StepDown => "step_down",
        }
    }
}

/// The long-running leader-only process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderCommand {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub stop_timeout: Duration,
    pub restart: Restart,
    /// Give up leadership when the process exits (as `consul lock` does).
    pub step_down_on_exit: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HooksConfig {
    pub on_elected: Option<HookCommand>,
    pub on_demoted: Option<HookCommand>,
    pub on_leader_change: Option<HookCommand>,
    pub while_leader: Option<HookCommand>,
    pub leader_command: Option<LeaderCommand>,
    pub shutdown_timeout: Duration,
    /// How fenced hooks are held; read at start only.
    pub containment: ContainmentMode,
    /// What a failed `on_elected` does.
    pub on_elected_failure: ElectedFailure,
}

impl Default for HooksConfig {
    fn default() -> Self {
        HooksConfig {
            on_elected: None,
            on_demoted: None,
            on_leader_change: None,
            while_leader: None,
            leader_command: None,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            containment: ContainmentMode::default(),
            on_elected_failure: ElectedFailure::default(),
        }
    }
}

impl HooksConfig {
    /// The event hook of `kind`, if set (`leader_command`, a [`LeaderCommand`], has none).
    pub fn command(&self, kind: HookKind) -> Option<&HookCommand> {
        match kind {
            HookKind::OnElected => self.on_elected.as_ref(),
            HookKind::OnDemoted => self.on_demoted.as_ref(),
            HookKind::OnLeaderChange => self.on_leader_change.as_ref(),
            HookKind::WhileLeader => self.while_leader.as_ref(),
            HookKind::LeaderCommand => None,
        }
    }

    /// Whether the hook of `kind` is set.
    pub fn is_set(&self, kind: HookKind) -> bool {
        match kind {
            HookKind::LeaderCommand => self.leader_command.is_some(),
            _ => self.command(kind).is_some(),
        }
    }

    /// Parses the `[hooks]` table (already checked for unknown top-level keys).
    pub fn parse(value: &toml::Value) -> Result<Self, HookConfigError> {
        let table = value
            .as_table()
            .ok_or_else(|| error("hooks", value, "must be a table"))?;
        let hook = |kind: HookKind| {
            table
                .get(kind.as_str())
                .map(|v| hook_command(&format!("hooks.{kind}"), v))
                .transpose()
        };
        let command = HookKind::LeaderCommand;
        Ok(HooksConfig {
            on_elected: hook(HookKind::OnElected)?,
            on_demoted: hook(HookKind::OnDemoted)?,
            on_leader_change: hook(HookKind::OnLeaderChange)?,
            while_leader: hook(HookKind::WhileLeader)?,
            leader_command: table
                .get(command.as_str())
                .map(|v| leader_command(&format!("hooks.{command}"), v))
                .transpose()?,
            shutdown_timeout: table
                .get("shutdown_timeout")
                .map(|v| duration("hooks.shutdown_timeout", v))
                .transpose()?
                .unwrap_or(DEFAULT_SHUTDOWN_TIMEOUT),
            containment: table
                .get("containment")
                .map(|v| {
                    choice(
                        "hooks.containment",
                        v,
                        ContainmentMode::parse,
                        ContainmentMode::CHOICES,
                    )
                })
                .transpose()?
                .unwrap_or_default(),
            on_elected_failure: table
                .get("on_elected_failure")
                .map(|v| {
                    choice(
                        "hooks.on_elected_failure",
                        v,
                        ElectedFailure::parse,
                        ElectedFailure::CHOICES,
                    )
                })
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

/// `[hooks]` as the configuration reads and prints it.
impl<'de> serde::Deserialize<'de> for HooksConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        HooksConfig::parse(&toml::Value::deserialize(deserializer)?)
            .map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for HooksConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_toml().serialize(serializer)
    }
}

/// One of a fixed set of words.
fn choice<T>(
    key: &str,
    value: &toml::Value,
    parse: impl Fn(&str) -> Option<T>,
    choices: &str,
) -> Result<T, HookConfigError> {
    value
        .as_str()
        .and_then(|text| parse(text.trim()))
        .ok_or_else(|| error(key, value, format!("must be {choices}")))
}

pub(super) fn argv(key: &str, value: &toml::Value) -> Result<Vec<String>, HookConfigError> {
    let items = value.as_array().ok_or_else(|| {
        error(
            key,
            value,
            "must be an argv array such as [\"/usr/local/bin/job\", \"--flag\"] (no shell; \
             write [\"sh\", \"-c\", \"…\"] for one)",
        )
    })?;
    let argv = items
        .iter()
        .map(|item| item.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| error(key, value, "every argv element must be a string"))?;
    if argv.first().is_none_or(|program| program.is_empty()) {
        return Err(error(key, value, "needs at least a program to run"));
    }
    Ok(argv)
}

pub(super) fn duration(key: &str, value: &toml::Value) -> Result<Duration, HookConfigError> {
    let text = value
        .as_str()
        .ok_or_else(|| error(key, value, "must be a duration string such as \"30s\""))?;
    crate::duration::POSITIVE
        .parse(text)
        .map_err(|reason| error(key, value, reason))
}

pub(super) fn env(
    key: &str,
    value: &toml::Value,
) -> Result<BTreeMap<String, String>, HookConfigError> {
    let table = value
        .as_table()
        .ok_or_else(|| error(key, value, "must be a table of NAME = \"value\""))?;
    table
        .iter()
        .map(|(name, v)| {
            let text = v
                .as_str()
                .ok_or_else(|| error(&format!("{key}.{name}"), v, "must be a string"))?;
            Ok((name.clone(), text.to_owned()))
        })
        .collect()
}

/// The table form's keys, checked so that a typo is an error rather than ignored.
pub(super) fn table<'a>(
    key: &str,
    value: &'a toml::Value,
    allowed: &[&str],
) -> Result<&'a toml::Table, HookConfigError> {
    let table = value.as_table().ok_or_else(|| {
        error(
            key,
            value,
            "must be an argv array or a table with `command`",
        )
    })?;
    if let Some(unknown) = table.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(error(
            &format!("{key}.{unknown}"),
            &table[unknown],
            format!("unknown key; known: {}", allowed.join(", ")),
        ));
    }
    if !table.contains_key("command") {
        return Err(error(key, value, "the table form needs `command`"));
    }
    Ok(table)
}

fn hook_command(key: &str, value: &toml::Value) -> Result<HookCommand, HookConfigError> {
    if value.is_array() {
        return Ok(HookCommand {
            argv: argv(key, value)?,
            timeout: DEFAULT_HOOK_TIMEOUT,
            env: BTreeMap::new(),
        });
    }
    let t = table(key, value, &["command", "timeout", "env"])?;
    Ok(HookCommand {
        argv: argv(&format!("{key}.command"), &t["command"])?,
        timeout: t
            .get("timeout")
            .map(|v| duration(&format!("{key}.timeout"), v))
            .transpose()?
            .unwrap_or(DEFAULT_HOOK_TIMEOUT),
        env: t
            .get("env")
            .map(|v| env(&format!("{key}.env"), v))
            .transpose()?
            .unwrap_or_default(),
    })
}

fn leader_command(key: &str, value: &toml::Value) -> Result<LeaderCommand, HookConfigError> {
    let plain = value.is_array();
    let empty = toml::Table::new();
    let t = if plain {
        &empty
    } else {
        table(
            key,
            value,
            &[
                "command",
                "env",
                "stop_timeout",
                "restart",
                "step_down_on_exit",
            ],
        )?
    };
    let restart = match t.get("restart") {
        None => Restart::OnFailure,
        Some(v) => choice(
            &format!("{key}.restart"),
            v,
            Restart::parse,
            Restart::CHOICES,
        )?,
    };
    let step_down_on_exit = match t.get("step_down_on_exit") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| {
            error(
                &format!("{key}.step_down_on_exit"),
                v,
                "must be true or false",
            )
        })?,
    };
    Ok(LeaderCommand {
        argv: if plain {
            argv(key, value)?
        } else {
            argv(&format!("{key}.command"), &t["command"])?
        },
        env: t
            .get("env")
            .map(|v| env(&format!("{key}.env"), v))
            .transpose()?
            .unwrap_or_default(),
        stop_timeout: t
            .get("stop_timeout")
            .map(|v| duration(&format!("{key}.stop_timeout"), v))
            .transpose()?
            .unwrap_or(DEFAULT_STOP_TIMEOUT),
        restart,
        step_down_on_exit,
    })
}

impl HooksConfig {
    /// The section as TOML, every default spelled out: what `leaderd check-config` prints.
    fn to_toml(&self) -> toml::Table {
        let mut table = toml::Table::new();
        table.insert(
            "shutdown_timeout".into(),
            duration_value(self.shutdown_timeout),
        );
        table.insert("containment".into(), self.containment.as_str().into());
        table.insert(
            "on_elected_failure".into(),
            self.on_elected_failure.as_str().into(),
        );
        for kind in HookKind::ALL {
            let entry = match kind {
                HookKind::LeaderCommand => self.leader_command.as_ref().map(|c| c.to_toml()),
                _ => self.command(kind).map(|hook| hook.to_toml()),
            };
            if let Some(entry) = entry {
                table.insert(kind.as_str().into(), toml::Value::Table(entry));
            }
        }
        table
    }
}

impl HookCommand {
    /// The table form, `timeout` included.
    fn to_toml(&self) -> toml::Table {
        let mut entry = toml::Table::new();
        entry.insert("command".into(), self.argv.clone().into());
        entry.insert("timeout".into(), duration_value(self.timeout));
        if !self.env.is_empty() {
            entry.insert("env".into(), env_value(&self.env));
        }
        entry
    }
}

impl LeaderCommand {
    /// The table form, every setting included.
    fn to_toml(&self) -> toml::Table {
        let mut entry = toml::Table::new();
        entry.insert("command".into(), self.argv.clone().into());
        if !self.env.is_empty() {
            entry.insert("env".into(), env_value(&self.env));
        }
        entry.insert("stop_timeout".into(), duration_value(self.stop_timeout));
        entry.insert("restart".into(), self.restart.as_str().into());
        entry.insert("step_down_on_exit".into(), self.step_down_on_exit.into());
        entry
    }
}

/// A duration the way the configuration takes it ("1m 30s").
pub(super) fn duration_value(d: Duration) -> toml::Value {
    humantime::format_duration(d).to_string().into()
}

pub(super) fn env_value(env: &BTreeMap<String, String>) -> toml::Value {
    toml::Value::Table(
        env.iter()
            .map(|(name, value)| (name.clone(), value.clone().into()))
            .collect(),
    )
}

pub mod health_check;

#[cfg(test)]
mod tests;
