//! Signals, turned into one shutdown future at the edge of the program, and channels of the
//! signals passed on (reloads, a lock's command), all on tokio's own signal handling.

use nix::sys::signal::Signal;
use std::future::Future;
use tokio::signal::unix::SignalKind;
use tokio::sync::mpsc;
use tracing::{info, warn};

/// Every one of `signals` from now on, as `message` of it, as it arrives. Handlers are
/// installed before this returns; each stays installed for the life of the process
/// (tokio's rule).
fn every<T: Send + 'static>(
    signals: &[Signal],
    message: fn(Signal) -> T,
) -> std::io::Result<mpsc::UnboundedReceiver<T>> {
    let (sender, receiver) = mpsc::unbounded_channel();
    for &signal in signals {
        let mut arrivals = tokio::signal::unix::signal(SignalKind::from_raw(signal as i32))?;
        let sender = sender.clone();
        tokio::spawn(async move {
            while arrivals.recv().await.is_some() {
                if sender.send(message(signal)).is_err() {
                    break;
                }
            }
        });
    }
    Ok(receiver)
}

/// Resolves on the first SIGTERM or SIGINT. A second one ends the process at once (exit
/// status 128 + signal number): the lease then lapses on its own.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    let mut signals = every(&[Signal::SIGTERM, Signal::SIGINT], |signal| signal)?;
    let (first, first_received) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut first = Some(first);
        while let Some(signal) = signals.recv().await {
            let number = signal as i32;
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
    Ok(async move {
        let _ = first_received.await;
    })
}

/// Every SIGTERM, SIGINT, SIGHUP and SIGQUIT from now on, for passing on to a child
/// (`leaderd lock`): the channel yields each one as it arrives.
pub fn forwarded_signals() -> std::io::Result<mpsc::UnboundedReceiver<Signal>> {
    let forwarded = [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ];
    every(&forwarded, |signal| signal)
}

/// Every SIGHUP from now on: a request to reload the configuration.
pub fn reload_requests() -> std::io::Result<mpsc::UnboundedReceiver<()>> {
    every(&[Signal::SIGHUP], |_| ())
}
