//! The `canon-sim` binary: `canon-sim serve` runs the local Canon, `canon-sim model` the
//! scripted OpenAI-compatible model (canon-wire.md §11.1 S1; hermes-host.md §20.2 item 6).
//!
//! ```text
//! canon-sim serve [--port N] [--seed S] [--print-env] [--environment ID --project ID]
//!                 [--frozen-clock MS] [--separate-stream-port] [--agents-json PATH]
//!                 [--exit-after SECS] [--tls | --tls-cert PEM --tls-key PEM]
//! canon-sim model --script FILE [--port N] [--print-env] [--exit-after SECS]
//! ```
//!
//! `--print-env` prints `KEY=value` lines on stdout once the server listens (this module's job
//! is printing, so it may use stdout). Logs go to nowhere: the binary installs no subscriber.
//!
//! `--tls` serves REST and SSE over TLS with the committed test identity of `crates/sim/tls/`
//! (clients must trust `crates/sim/tls/ca.pem`); `--tls-cert`/`--tls-key` use another PEM pair.
//! Either way the URLs printed (and `--agents-json`) start with `https://`
//! (canon-wire.md §11.1 S3).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::time::Duration;

use canon_sim::model::{ModelServer, Script};
use canon_sim::{Sim, SimConfig, TlsIdentity};

const USAGE: &str = "usage:\n  canon-sim serve [--port N] [--seed S] [--print-env] [--environment ID --project ID] [--frozen-clock MS] [--separate-stream-port] [--agents-json PATH] [--exit-after SECS] [--tls | --tls-cert PEM --tls-key PEM]\n  canon-sim model --script FILE [--port N] [--print-env] [--exit-after SECS]";

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("canon-sim: {e}");
            std::process::exit(2);
        }
    }
}

fn value<T: std::str::FromStr>(
    args: &[String],
    i: usize,
    flag: &str,
) -> Result<T, Box<dyn std::error::Error>> {
    args.get(i + 1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{flag} needs a valid value\n{USAGE}").into())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = args.first().cloned() else {
        return Err(USAGE.into());
    };
    let mut config = SimConfig::default();
    let mut print_env = false;
    let mut exit_after: Option<u64> = None;
    let mut script_path: Option<String> = None;
    let mut agents_json: Option<String> = None;
    let mut tls = false;
    let mut tls_cert: Option<String> = None;
    let mut tls_key: Option<String> = None;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--port" => config.port = value(&args, i, "--port")?,
            "--seed" => config.seed = value(&args, i, "--seed")?,
            "--environment" => {
                config.environment.environment_id = value(&args, i, "--environment")?
            }
            "--project" => config.environment.project_id = value(&args, i, "--project")?,
            "--frozen-clock" => config.frozen_clock_ms = Some(value(&args, i, "--frozen-clock")?),
            "--exit-after" => exit_after = Some(value(&args, i, "--exit-after")?),
            "--script" => script_path = Some(value(&args, i, "--script")?),
            "--agents-json" => agents_json = Some(value(&args, i, "--agents-json")?),
            "--tls-cert" => tls_cert = Some(value(&args, i, "--tls-cert")?),
            "--tls-key" => tls_key = Some(value(&args, i, "--tls-key")?),
            "--tls" => {
                tls = true;
                i += 1;
                continue;
            }
            "--separate-stream-port" => {
                config.separate_stream_port = true;
                i += 1;
                continue;
            }
            "--print-env" => {
                print_env = true;
                i += 1;
                continue;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
        i += 2;
    }
    config.tls = match (tls, tls_cert, tls_key) {
        (false, None, None) => None,
        (true, None, None) => Some(TlsIdentity::TestFixture),
        (_, Some(cert), Some(key)) => Some(TlsIdentity::Files {
            cert: cert.into(),
            key: key.into(),
        }),
        _ => return Err(format!("--tls-cert and --tls-key go together\n{USAGE}").into()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut out = std::io::stdout();
        match command.as_str() {
            "serve" => {
                let sim = Sim::start(config).await?;
                if let Some(path) = &agents_json {
                    let text = serde_json::to_string_pretty(&sim.agents_json("canon-sim"))?;
                    std::fs::write(path, text + "\n")
                        .map_err(|e| format!("could not write {path}: {e}"))?;
                }
                if print_env {
                    for line in sim.env_lines() {
                        writeln!(out, "{line}")?;
                    }
                } else {
                    writeln!(out, "canon-sim listening on {}", sim.base_url())?;
                }
                out.flush()?;
                wait(exit_after).await;
                drop(sim);
            }
            "model" => {
                if config.tls.is_some() {
                    return Err(format!("model serves plain HTTP only\n{USAGE}").into());
                }
                let path =
                    script_path.ok_or_else(|| format!("model needs --script FILE\n{USAGE}"))?;
                let script = Script::load(std::path::Path::new(&path))?;
                let model = ModelServer::start(script, config.port).await?;
                if print_env {
                    writeln!(out, "OPENAI_BASE_URL={}", model.base_url())?;
                    writeln!(out, "OPENAI_API_KEY=sk-fake-local")?;
                } else {
                    writeln!(out, "canon-sim model listening on {}", model.base_url())?;
                }
                out.flush()?;
                wait(exit_after).await;
                drop(model);
            }
            _ => return Err(USAGE.into()),
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

async fn wait(exit_after: Option<u64>) {
    match exit_after {
        Some(secs) => {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
