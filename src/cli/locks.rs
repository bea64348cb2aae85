//! `leaderd locks`: every live lease in the table, elections' and locks' alike, as the
//! database sees it now: who holds it, in which term, for how long it has held it, since
//! when it was last renewed and how long it has left; a holder of this host whose process
//! is gone is marked so. Read through the read-only store, so a role that may only SELECT
//! can ask, from any host.

use anyhow::Context;
use serde::Serialize;
use std::time::Duration;

use crate::config::Config;
use crate::lock::LOCK_ROW_PREFIX;

use super::unlock::{HolderProcess, holder_process};

#[derive(Debug, Clone, clap::Args)]
pub(super) struct LocksArgs {
    /// Print JSON (an array) instead of a table.
    #[arg(long)]
    json: bool,
}

/// One live lease, as `--json` prints it.
#[derive(Debug, Serialize)]
struct HeldReport {
    /// The lock's name as `leaderd lock` takes it, or the election's.
    name: String,
    /// `lock` (a `leaderd lock` row, `lock:NAME`) or `election`.
    kind: &'static str,
    /// The row's name in the table.
    row: String,
    holder: String,
    term: i64,
    /// Since the holder took the lease (its term started), by the database clock; `null`
    /// for a term started before the table recorded it (or by an older leaderd).
    held_ms: Option<u64>,
    /// Since the holder last renewed (or took) the lease, by the database clock.
    renewed_ms: u64,
    /// How long the lease has left unless renewed (a `--hold-at-least` runs it out).
    left_ms: u64,
    /// The lease length the holder last set.
    lease_ms: u64,
    /// The holder's process where it is a `leaderd lock` of this host (`node id:pid`):
    /// `running`, or `gone` (its lock is kept by nothing but the lease: `leaderd unlock`
    /// releases it); `null` where this host cannot tell.
    holder_process: Option<&'static str>,
}

pub(super) async fn locks(config: Config, args: LocksArgs) -> anyhow::Result<()> {
    let mut store = config.store(false).read_only();
    let rows = store
        .held_rows()
        .await
        .context("cannot list the held leases")?;
    let ms = |d: Duration| d.as_millis() as u64;
    let reports: Vec<HeldReport> = rows
        .into_iter()
        .map(|row| {
            let (kind, name) = match row.name.strip_prefix(LOCK_ROW_PREFIX) {
                Some(lock) => ("lock", lock.to_owned()),
                None => ("election", row.name.clone()),
            };
            let process = match holder_process(&row.holder, &config.node.id, row.held) {
                HolderProcess::Running(_) => Some("running"),
                HolderProcess::Gone(_) => Some("gone"),
                HolderProcess::Unknown => None,
            };
            HeldReport {
                name,
                kind,
                holder_process: process,
                holder: row.holder.clone(),
                term: row.term,
                held_ms: row.held.map(ms),
                renewed_ms: ms(row.age),
                left_ms: ms(row.remaining()),
                lease_ms: ms(row.lease),
                row: row.name,
            }
        })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(());
    }
    if reports.is_empty() {
        println!("no lease is held");
        return Ok(());
    }
    let width = |f: fn(&HeldReport) -> usize, title: &str| {
        reports.iter().map(f).max().unwrap_or(0).max(title.len())
    };
    let name_w = width(|r| r.name.chars().count(), "NAME");
    fn holder(r: &HeldReport) -> String {
        match r.holder_process {
            Some("gone") => format!("{} (gone)", r.holder),
            _ => r.holder.clone(),
        }
    }
    let holder_w = width(|r| holder(r).chars().count(), "HOLDER");
    println!(
        "{:<name_w$}  {:<8}  {:<holder_w$}  {:>6}  {:>10}  {:>10}  {:>10}",
        "NAME", "KIND", "HOLDER", "TERM", "HELD", "RENEWED", "LEFT"
    );
    let seconds = |ms: u64| format!("{:.1}s", ms as f64 / 1000.0);
    for r in &reports {
        println!(
            "{:<name_w$}  {:<8}  {:<holder_w$}  {:>6}  {:>10}  {:>10}  {:>10}",
            r.name,
            r.kind,
            holder(r),
            r.term,
            r.held_ms.map_or_else(|| "-".to_owned(), seconds),
            format!("{} ago", seconds(r.renewed_ms)),
            seconds(r.left_ms),
        );
    }
    if reports.iter().any(|r| r.holder_process == Some("gone")) {
        println!(
            "(gone): a `leaderd lock` of this host whose process has ended; its lock stays \
             taken until the lease lapses, or `leaderd unlock NAME` releases it"
        );
    }
    Ok(())
}
