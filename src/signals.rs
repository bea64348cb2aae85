//! Signals, turned into one shutdown future at the edge of the program.

use futures_util::StreamExt;
use nix::sys::signal::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook_tokio::Signals;
use std::future::Future;
use tracing::{info, warn};

/// Resolves on the first SIGTERM or SIGINT. A second one ends the process at once (exit
/// status 128 + signal number): the lease then lapses on its own.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    let (first, first_received) = tokio::sync::oneshot::channel::<i32>();
    tokio::spawn(async move {
        let mut first = Some(first);
        while let Some(signal) = signals.next().await {
            match first.take() {
                Some(first) => {
                    info!(signal, "stopping: stepping down");
                    let _ = first.send(signal);
                }
                None => {
                    warn!(signal, "second signal: exiting at once");
                    std::process::exit(128 + signal);
                }
            }
        }
    });
    Ok(async move {
        let _ = first_received.await;
    })
}

/// Every SIGTERM, SIGINT, SIGHUP and SIGQUIT from now on, for passing on to a child
/// (`leaderd lock`): the channel yields each one as it arrives.
pub fn forwarded_signals() -> std::io::Result<tokio::sync::mpsc::UnboundedReceiver<Signal>> {
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP, SIGQUIT])?;
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(number) = signals.next().await {
            let Ok(signal) = Signal::try_from(number) else {
                continue;
            };
            if sender.send(signal).is_err() {
                break;
            }
        }
    });
    Ok(receiver)
}

/// Every SIGHUP from now on: a request to reload the configuration.
pub fn reload_requests() -> std::io::Result<tokio::sync::mpsc::UnboundedReceiver<()>> {
    let mut signals = Signals::new([SIGHUP])?;
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while signals.next().await.is_some() {
            if sender.send(()).is_err() {
                break;
            }
        }
    });
    Ok(receiver)
}
