//! `leaderd status`: who leads, as the database sees it, with every member; and
//! `status --local`, this node's own view from its status file, as an exit status.

use anyhow::Context;
use serde::Serialize;
use std::process::ExitCode;

use super::exit::{EXIT_FOLLOWER, EXIT_STATUS_UNKNOWN};
use crate::config::Config;
use crate::election::Role;
use crate::hooks::HookKind;
use crate::operator::{self, MemberReport};
use crate::status_file::StatusDocument;
use crate::store::{ControlStore, LeaseStore};

#[derive(Debug, Serialize)]
struct ElectionReport<'a> {
    election: &'a str,
    leader: Option<&'a str>,
    term: Option<i64>,
    /// The holder (live or not) of the row; differs from `leader` once its lease lapsed.
    holder: Option<&'a str>,
    lease_ms: Option<u64>,
    age_ms: Option<u64>,
    remaining_ms: Option<u64>,
    /// `leaderd pause`: how long the pause lasts yet (`null`: not paused).
    paused: bool,
    paused_ms: Option<u64>,
    /// A handover in its window: only this node may claim.
    handover_to: Option<&'a str>,
    /// Every member of the election (`null` if the table cannot be read).
    members: Option<Vec<MemberReport>>,
}

pub(super) async fn status(config: Config, json: bool) -> anyhow::Result<()> {
    // Reads only, so that a role that may only SELECT can ask.
    let mut store = config.store(false).read_only();
    let row = store
        .get(&config.election.name)
        .await
        .with_context(|| format!("cannot read election {:?}", config.election.name))?;
    let ms = |d: std::time::Duration| d.as_millis() as u64;
    let report = ElectionReport {
        election: &config.election.name,
        leader: row.as_ref().and_then(|r| r.live_holder()),
        term: row.as_ref().map(|r| r.term),
        holder: row.as_ref().and_then(|r| r.holder.as_deref()),
        lease_ms: row.as_ref().map(|r| ms(r.lease)),
        age_ms: row.as_ref().map(|r| ms(r.age)),
        remaining_ms: row.as_ref().map(|r| ms(r.remaining())),
        paused: row.as_ref().is_some_and(|r| r.paused()),
        paused_ms: row.as_ref().and_then(|r| r.pending.paused_for).map(ms),
        handover_to: row.as_ref().and_then(|r| r.pending.handover_to.as_deref()),
        members: None,
    };
    let leader = report.leader;
    let members = match store.members(&config.election.name).await {
        Ok(members) => Some(operator::member_reports(&members, leader)),
        Err(error) => {
            tracing::warn!(%error, "cannot read the members");
            None
        }
    };
    let report = ElectionReport { members, ..report };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("election:  {}", report.election);
    println!("leader:    {}", report.leader.unwrap_or("none"));
    match &row {
        None => println!("term:      none (no node has joined yet)"),
        Some(row) => {
            println!("term:      {}", row.term);
            println!(
                "lease:     renewed {} ago, {} left of {}{}",
                readable(row.age),
                readable(row.remaining()),
                readable(row.lease),
                match (&row.holder, row.live_holder()) {
                    (None, _) => " (released)".to_owned(),
                    (Some(holder), None) => format!(" (lapsed; last held by {holder})"),
                    _ => String::new(),
                }
            );
            if let Some(left) = row.pending.paused_for {
                println!(
                    "paused:    for {} more (leaderd resume ends it)",
                    humantime::format_duration(std::time::Duration::from_secs(left.as_secs()))
                );
            }
            if let Some(to) = &row.pending.handover_to {
                println!("handover:  to {to}");
            }
        }
    }
    match &report.members {
        Some(members) if members.is_empty() => println!(
            "members:   none recorded (a running node records itself in leaderd_member at \
             start and every 10 s)"
        ),
        Some(_) => println!("members:"),
        None => {}
    }
    if let Some(members) = &report.members {
        for m in members {
            println!(
                "  {:<20} {:<9} priority {:<4} {} on {}, seen {:.1}s ago{}",
                m.node_id,
                m.role,
                m.priority,
                m.version,
                if m.host.is_empty() { "?" } else { &m.host },
                m.seen_ms as f64 / 1000.0,
                match m.preempt_hold_ms {
                    Some(ms) => format!(", no preemption for {:.0}s", ms as f64 / 1000.0),
                    None => String::new(),
                }
            );
        }
    }
    Ok(())
}

/// A duration as a person reads it at a glance: milliseconds below a second, tenths of a
/// second below a minute, whole seconds above ("1m 21s", not "1m 21s 603ms").
fn readable(duration: std::time::Duration) -> String {
    if duration < std::time::Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else if duration < std::time::Duration::from_secs(60) {
        format!("{:.1}s", duration.as_secs_f64())
    } else {
        let seconds = std::time::Duration::from_secs(duration.as_secs_f64().round() as u64);
        humantime::format_duration(seconds).to_string()
    }
}

/// `status --local`: the exit status says what this node's status file says, as long as
/// the file is still valid (`valid_until` ahead: a frozen or dead daemon's file goes stale).
pub(super) fn local_status(config: &Config, json: bool) -> ExitCode {
    let path = &config.status.path;
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!(
                "leaderd: cannot read status file {}: {error}",
                path.display()
            );
            return ExitCode::from(EXIT_STATUS_UNKNOWN);
        }
    };
    let document: StatusDocument = match serde_json::from_str(&text) {
        Ok(document) => document,
        Err(error) => {
            eprintln!(
                "leaderd: status file {} is not a leaderd status document: {error}",
                path.display()
            );
            return ExitCode::from(EXIT_STATUS_UNKNOWN);
        }
    };
    let fresh = document.valid_at(std::time::SystemTime::now());
    let role = document.role;
    if json {
        print!("{text}");
    } else {
        let leader = document.leader.as_deref().unwrap_or("none");
        let term = document
            .term
            .map_or("none".to_owned(), |term| term.to_string());
        let observer = if document.candidate { "" } else { ", observer" };
        let health = document.health.map_or(String::new(), |health| {
            format!(", health check {health:?}").to_lowercase()
        });
        let backoff = document.backoff.as_ref().map_or(String::new(), |b| {
            let then = match b.hook.parse() {
                Ok(HookKind::OnElected) => "claims nothing until",
                _ => "restarts it at",
            };
            format!(
                ", backing off: {} failed {} times in a row, {then} {}",
                b.hook, b.failures, b.until
            )
        });
        let said = format!(
            "{} (leader {leader}, term {term}{observer}{health}{backoff})",
            role.as_str()
        );
        match fresh {
            true => println!("{said}"),
            // What the exit status says, first: a stale file's role is no one's now.
            false => println!(
                "unknown: the status file is stale (valid until {}; is leaderd running?); \
                 it last said {said}",
                document.valid_until
            ),
        }
    }
    match role {
        Role::Leader if fresh => ExitCode::SUCCESS,
        Role::Follower if fresh => ExitCode::from(EXIT_FOLLOWER),
        _ => ExitCode::from(EXIT_STATUS_UNKNOWN),
    }
}
