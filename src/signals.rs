//! Signals, delivered by signal-hook (`signal-hook-tokio`'s stream) and turned at the edge
//! of the program into one shutdown future and a stream of reload requests, or passed on
//! (a lock's command).

use futures_util::StreamExt;
use nix::sys::signal::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook_tokio::Signals;
use std::future::Future;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

/// Every one of `signals` from now on, as `message` of it, as it arrives. The handlers are
/// installed before this returns and stay for the life of the process: a signal that
/// arrives while nobody reads is still caught, not left to its default action.
fn every<T: Send + 'static>(
    signals: &[i32],
    message: fn(i32) -> Option<T>,
) -> std::io::Result<mpsc::UnboundedReceiver<T>> {
    let mut stream = Signals::new(signals)?;
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(signal) = stream.next().await {
            let Some(message) = message(signal) else {
                continue;
            };
            if sender.send(message).is_err() {
                break;
            }
        }
    });
    Ok(receiver)
}

/// Resolves on the first of `stops`. A second one ends the process at once (exit status
/// 128 + signal number): the lease then lapses on its own. Every `reload` signal goes to
/// the returned channel.
fn split(
    mut signals: mpsc::UnboundedReceiver<i32>,
    reload: Option<i32>,
) -> (impl Future<Output = ()>, mpsc::UnboundedReceiver<()>) {
    let (first, first_received) = oneshot::channel::<()>();
    let (reloads, reload_requests) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut first = Some(first);
        while let Some(number) = signals.recv().await {
            if Some(number) == reload {
                let _ = reloads.send(());
                continue;
            }
            match first.take() {
                Some(first) => {
                    info!(signal = number, "stopping: stepping down");
                    let _ = first.send(());
                }
                None => {
                    warn!(signal = number, "second signal: exiting at once");
                    std::process::exit(128 + number);
                }
            }
        }
    });
    let shutdown = async move {
        let _ = first_received.await;
    };
    (shutdown, reload_requests)
}

/// `leaderd run`'s signals: the one shutdown future (the first SIGTERM or SIGINT; a second
/// exits at once), and every SIGHUP from now on, a request to reload the configuration.
pub fn daemon_signals() -> std::io::Result<(impl Future<Output = ()>, mpsc::UnboundedReceiver<()>)>
{
    Ok(split(
        every(&[SIGTERM, SIGINT, SIGHUP], Some)?,
        Some(SIGHUP),
    ))
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits at once (`leaderd watch`).
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    Ok(split(every(&[SIGTERM, SIGINT], Some)?, None).0)
}

/// Every SIGTERM, SIGINT, SIGHUP and SIGQUIT from now on, for passing on to a child
/// (`leaderd lock`): the channel yields each one as it arrives.
pub fn forwarded_signals() -> std::io::Result<mpsc::UnboundedReceiver<Signal>> {
    every(&[SIGTERM, SIGINT, SIGHUP, SIGQUIT], |number| {
        Signal::try_from(number).ok()
    })
}
