//! `canon-hermes setup` (cli.md §4): register or reconnect a Canon agent and bind the Hermes
//! profile to it, bind an existing `agents.json` profile, or store a raw API key.
//!
//! The flow, in the order of cli.md §4.1: the header; "already configured?" (a `CANON_API_KEY` or
//! `CANON_AGENT` in the process environment or `<HERMES_HOME>/.env`, or credentials that resolve
//! as the daemon resolves them) and "Reconfigure Canon?"; the three-way choice; then
//!
//! 1. register or reconnect (cli.md §4.3): the agent's name, description, owner phone and local
//!    profile name, the connection (cli.md §4.2) verified by the health check (cli.md §5.3), the
//!    pending registration of `pending-registrations.json` (created, bound to the connection,
//!    resumed when it was already submitted), `POST /agents/register`, the wait for the owner's
//!    approval (`approval`), the profile saved into `agents.json`, the ack, `.env`;
//! 2. an existing profile (cli.md §4.4), checked with the daemon's profile rules;
//! 3. a raw key (cli.md §4.5) with a verified connection.
//!
//! Every text the operator sees is cli.md §4's (`console` holds Hermes' prompt conventions).
//! Failures print their line and exit 1, a decline exits 0, Ctrl-C or end of input where an
//! answer is needed exits 130 after a blank line and `Canon setup cancelled.` (cli.md §1, §11).
//!
//! Where things come from and go: the files and the resolver are canon-profiles' (the same
//! `agents.json` reader, bootstrap merge, write procedure and profile rules as `serve --stdio`
//! and `doctor`); the Canon calls are canon-transport's through [`crate::canon`] (a client with
//! no key); `.env` is changed only through Hermes' own `save_env_value`/`remove_env_value`, run
//! by the `env.set` helper in the Hermes Python (cli.md §2.3, Q4), which is checked before the
//! first question so that a registration is never approved into a profile that cannot be
//! written.
//!
//! Headless use: a flag answers its prompt (the prompt is then not printed), so a script can run
//! setup with every answer on the command line; without a terminal the prompts still print and
//! read their answers line by line from stdin. An API key never travels on the command line: the
//! raw-key choice reads it from an environment variable (`--api-key-env`) or from stdin.
//!
//! Secrets (API keys, the poll token) are never printed: canon-profiles and canon-transport put
//! none in their errors, and every line is also redacted by the console before it is written.

mod approval;
mod console;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use canon_profiles::credentials::{hermes_profile_entry, profile_credentials, HERMES_CLIENT_TYPE};
use canon_profiles::environment::{packaged, DEFAULT_ENVIRONMENT_ID};
use canon_profiles::files::{self, AgentProfiles, CanonPaths, PendingRegistrations, BOOTSTRAP_ENV};
use canon_profiles::naming::profile_slug;
use canon_profiles::timestamp::utc_seconds;
use canon_profiles::{
    resolve_connection, resolve_credentials, Connection, ConnectionOverrides, CredentialError,
    DotEnv, EnvLookup, HermesEnv, Resolution, StoreError,
};
use canon_transport::CanonClient;
use canon_wire::types::{Registration, RegistrationStatus, RegistrationTicket};
use canon_wire::ApiKey;
use serde_json::{json, Map, Value};

use self::approval::{Timing, Verdict};
use self::console::{answer, Cancelled, Console};
use crate::exit;
use crate::hermes::{self, Helpers, HostEnv, Profile};

/// Help text after the options.
const AFTER_HELP: &str = "\
Without a terminal every prompt still prints and reads its answer as one line of stdin, so a \
script can pipe the answers in. A flag answers its prompt instead (the prompt is then skipped); \
with every needed flag given, nothing is read. End of input where an answer is needed cancels; \
at \"Reconfigure Canon?\" it means no.

The connection prompts are prefilled from CANON_ENVIRONMENT_ID, CANON_BASE_URL, CANON_STREAM_URL, \
CANON_RTDB_URL and CANON_FIREBASE_API_KEY (the process environment, then <HERMES_HOME>/.env) and \
from the packaged endpoints of canon-prod-v1 and canon-dev-v1; another environment id needs all \
four endpoints. The connection is checked against the environment's health endpoints before it \
is saved. An API key is never taken from the command line: --api-key-env reads it from the \
environment.

A registration waits up to 5 minutes for the owner to approve it in the Canon app; one that was \
interrupted or timed out is resumed (the same request) by the next run with the same local \
profile name and connection.

Exit status: 0 configured, or already configured and not reconfigured; 1 failed (the reason is \
printed); 2 usage error; 130 cancelled (Ctrl-C, or end of input at a prompt).

Examples:
  canon-hermes setup
  canon-hermes setup --register --name Ops --owner-phone +15551234567    # asks the rest
  canon-hermes setup --existing ops --reconfigure
  yes '' | canon-hermes setup --api-key-env --environment-id canon-prod-v1
      # the key from $CANON_API_KEY, every other answer its default";

/// Heading of the flags that answer prompts.
const ANSWERS: &str = "Answers (each skips its prompt)";

/// `canon-hermes setup` (cli.md §1).
#[derive(Debug, Default, clap::Args)]
#[command(
    after_help = AFTER_HELP,
    group(clap::ArgGroup::new("choice").multiple(false)),
    group(clap::ArgGroup::new("connects").args(["register", "api_key_env"]).multiple(true))
)]
pub(crate) struct SetupArgs {
    /// Reconnect this exact transferred Canon agent identity
    #[arg(long, value_name = "ID", conflicts_with_all = ["existing", "api_key_env"])]
    agent_id: Option<String>,
    /// The Hermes profile to configure (default: the active profile, as `hermes` picks it)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// The Python of the Hermes environment (default: $HERMES_PYTHON, the `python` beside this
    /// binary when it sits in a venv's bin/, the `hermes` launcher's interpreter,
    /// ~/.hermes/hermes-agent/venv/bin/python)
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,

    /// "Reconfigure Canon?" when Canon is already configured: yes
    #[arg(long, help_heading = ANSWERS)]
    reconfigure: bool,
    /// "How would you like to configure Canon?": register or reconnect a Hermes agent (1)
    #[arg(long, group = "choice", help_heading = ANSWERS)]
    register: bool,
    /// "How would you like to configure Canon?": use this existing profile of agents.json (2)
    #[arg(long, value_name = "PROFILE", group = "choice", help_heading = ANSWERS)]
    existing: Option<String>,
    /// "How would you like to configure Canon?": the API key in environment variable VAR, by
    /// default CANON_API_KEY (3; that variable then does not count as "already configured")
    #[arg(
        long,
        value_name = "VAR",
        num_args = 0..=1,
        default_missing_value = "CANON_API_KEY",
        group = "choice",
        help_heading = ANSWERS
    )]
    api_key_env: Option<String>,
    /// "Agent display name" (with --register)
    #[arg(long, value_name = "NAME", requires = "register", help_heading = ANSWERS)]
    name: Option<String>,
    /// "Agent description" (with --register)
    #[arg(long, value_name = "TEXT", requires = "register", help_heading = ANSWERS)]
    description: Option<String>,
    /// "Canon owner phone number" in E.164, exactly as in the Canon app (with --register)
    #[arg(long, value_name = "PHONE", requires = "register", help_heading = ANSWERS)]
    owner_phone: Option<String>,
    /// "Local Canon profile name": the agents.json name to save the agent under (with
    /// --register)
    #[arg(long, value_name = "NAME", requires = "register", help_heading = ANSWERS)]
    local_profile: Option<String>,
    /// "Canon environment ID" (with --register or --api-key-env)
    #[arg(long, value_name = "ID", requires = "connects", help_heading = ANSWERS)]
    environment_id: Option<String>,
    /// "Canon API base URL" (with --register or --api-key-env)
    #[arg(long, value_name = "URL", requires = "connects", help_heading = ANSWERS)]
    base_url: Option<String>,
    /// "Canon stream URL" (with --register or --api-key-env)
    #[arg(long, value_name = "URL", requires = "connects", help_heading = ANSWERS)]
    stream_url: Option<String>,
    /// "Canon Realtime Database URL" (with --register or --api-key-env)
    #[arg(long, value_name = "URL", requires = "connects", help_heading = ANSWERS)]
    rtdb_url: Option<String>,
    /// "Canon Firebase web API key", a public key (with --register or --api-key-env)
    #[arg(long, value_name = "KEY", requires = "connects", help_heading = ANSWERS)]
    firebase_api_key: Option<String>,

    /// Milliseconds between approval polls (tests; canon-wire.md §1.4 says 3000)
    #[arg(long, hide = true, value_name = "MS")]
    poll_interval_ms: Option<u64>,
    /// Seconds to wait for approval (tests; canon-wire.md §1.4 says 300)
    #[arg(long, hide = true, value_name = "SECS")]
    approval_timeout_secs: Option<u64>,
}

impl SetupArgs {
    /// No answers given: every question is asked (`install --setup`).
    pub(crate) fn interactive(profile: Option<String>, python: Option<PathBuf>) -> SetupArgs {
        SetupArgs {
            profile,
            python,
            ..SetupArgs::default()
        }
    }

    /// The choice the flags made (0, 1, 2 as in cli.md §4.1 step 3), if any.
    fn choice(&self) -> Option<usize> {
        if self.register {
            Some(0)
        } else if self.existing.is_some() {
            Some(1)
        } else if self.api_key_env.is_some() {
            Some(2)
        } else {
            None
        }
    }

    fn timing(&self) -> Timing {
        let default = Timing::default();
        Timing {
            interval: self
                .poll_interval_ms
                .map_or(default.interval, Duration::from_millis),
            timeout: self
                .approval_timeout_secs
                .map_or(default.timeout, Duration::from_secs),
        }
    }
}

/// cli.md §4.1 step 3.
const CHOICES: [&str; 3] = [
    "Register/reconnect a Hermes agent with Canon (recommended)",
    "Use an existing Canon profile from ~/.canon/agents.json",
    "Paste an existing Canon API key (advanced/headless)",
];

/// `developerInfo` of a registration (canon-wire.md §1.4).
const DEVELOPER_INFO: &str = "Hermes gateway platform adapter";

/// The `.env` keys of a direct key's connection (cli.md §4.3 step 11, §4.5 step 4).
const CONNECTION_KEYS: [&str; 5] = [
    "CANON_ENVIRONMENT_ID",
    "CANON_BASE_URL",
    "CANON_STREAM_URL",
    "CANON_RTDB_URL",
    "CANON_FIREBASE_API_KEY",
];

/// Every `.env` key `setup` may write: the profile name, a direct key and its connection
/// (`uninstall --purge-credentials` removes exactly these).
pub(crate) fn written_keys() -> impl Iterator<Item = &'static str> {
    ["CANON_AGENT", "CANON_API_KEY"]
        .into_iter()
        .chain(CONNECTION_KEYS)
}

/// Runs `setup` (cli.md §1): prints the profile line, then [`run_in_profile`].
pub(crate) fn setup_command(args: &SetupArgs) -> u8 {
    let env = HostEnv::from_process();
    let profile = match hermes::locate_profile(args.profile.as_deref(), &env) {
        Ok(profile) => profile,
        Err(error) => {
            report(&format!("{error:#}"));
            return exit::REJECTED;
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{}", profile.line());
    let _ = out.flush();
    run_in_profile(args, &env, &profile)
}

/// `setup` in a profile already located and announced (`setup` itself, and `install --setup`
/// after a successful install, cli.md §3.1 step 6). The exit code of cli.md §1.
pub(crate) fn run_in_profile(args: &SetupArgs, env: &HostEnv, profile: &Profile) -> u8 {
    let inputs = match Inputs::gather(args, env, profile) {
        Ok(inputs) => inputs,
        Err(error) => {
            report(&format!("{error:#}"));
            return exit::REJECTED;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            report(&format!("starting the tokio runtime: {error}"));
            return exit::REJECTED;
        }
    };
    let code = runtime.block_on(async {
        let console = match Console::new() {
            Ok(console) => console,
            Err(error) => {
                report(&format!("catching Ctrl-C: {error}"));
                return exit::REJECTED;
            }
        };
        let mut flow = Flow {
            args,
            console,
            inputs,
        };
        match flow.run().await {
            Ok(()) => exit::OK,
            Err(Stop::Failed) => exit::REJECTED,
            Err(Stop::Cancelled) => {
                flow.console.cancelled();
                exit::CANCELLED
            }
        }
    });
    // A prompt abandoned by Ctrl-C may still be blocked reading stdin: do not wait for it.
    runtime.shutdown_background();
    code
}

/// An error line on stderr (the failures that are not cli.md §4's own lines).
fn report(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Why the flow stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// A failure whose line is printed (exit 1).
    Failed,
    /// Ctrl-C or end of input (exit 130).
    Cancelled,
}

impl From<Cancelled> for Stop {
    fn from(Cancelled: Cancelled) -> Stop {
        Stop::Cancelled
    }
}

/// The environment as setup reads it: the process environment over the profile's `.env`
/// ([`HermesEnv`], as the daemon and doctor read it), except that the variable `--api-key-env`
/// takes the key from is read from the `.env` alone (it is an answer, not a configuration).
struct SetupEnv {
    env: HermesEnv,
    answer_variable: Option<String>,
}

impl EnvLookup for SetupEnv {
    fn var(&self, name: &str) -> Option<String> {
        if self.answer_variable.as_deref() == Some(name) {
            self.env.dotenv().var(name)
        } else {
            self.env.var(name)
        }
    }
}

/// What the flow needs before its first line: checked up front so that a missing Hermes Python
/// or an unreadable `.env` fails before any question.
struct Inputs {
    helpers: Helpers,
    env_file: PathBuf,
    lookup: SetupEnv,
    paths: CanonPaths,
}

impl Inputs {
    fn gather(args: &SetupArgs, env: &HostEnv, profile: &Profile) -> anyhow::Result<Inputs> {
        let python = hermes::locate_python(args.python.as_deref(), env)?;
        let helpers = Helpers::new(python, profile.home.clone());
        // Imports Hermes' config helpers, which the `.env` changes at the end need.
        helpers.call("env.get", json!({"keys": []}))?;
        let env_file = profile.home.join(".env");
        let dotenv = DotEnv::read(&env_file)
            .map_err(|e| anyhow::anyhow!("Could not read {}: {e}", env_file.display()))?;
        let answer_variable = args
            .api_key_env
            .as_deref()
            .filter(|name| *name == "CANON_API_KEY")
            .map(str::to_owned);
        let lookup = SetupEnv {
            env: HermesEnv::new(dotenv),
            answer_variable,
        };
        let paths = CanonPaths::from_env(&lookup, env.home.as_deref()).ok_or_else(|| {
            anyhow::anyhow!("HOME is not set, so ~/.canon cannot be found; set CANON_HOME or HOME")
        })?;
        Ok(Inputs {
            helpers,
            env_file,
            lookup,
            paths,
        })
    }
}

/// One run of the flow.
struct Flow<'a> {
    args: &'a SetupArgs,
    console: Console,
    inputs: Inputs,
}

/// What a registration asked for (cli.md §4.3 step 1).
struct Request {
    name: String,
    description: String,
    owner_phone: String,
    profile: String,
}

impl Flow<'_> {
    async fn run(&mut self) -> Result<(), Stop> {
        self.console.header();
        self.console
            .info("  Canon can use an existing agent profile or register a new Hermes agent.");
        self.console
            .info("  Registration sends an approval request to the Canon owner app.");
        if !self.wanted().await? {
            return Ok(());
        }
        let choice = match self.args.choice() {
            Some(choice) => choice,
            None => {
                self.console
                    .choice("  How would you like to configure Canon?", &CHOICES, 0)
                    .await?
            }
        };
        match choice {
            0 => self.register().await,
            1 => self.existing().await,
            _ => self.raw_key().await,
        }
    }

    /// The variable `name` as the flow reads it.
    fn var(&self, name: &str) -> Option<String> {
        self.inputs.lookup.var(name)
    }

    /// `agents.json` with the bootstrap merged (cli.md §6.1), as the daemon reads it.
    fn load_agents(&self) -> Result<AgentProfiles, StoreError> {
        files::load_agents(
            &self.inputs.paths.agents,
            self.var(BOOTSTRAP_ENV).as_deref(),
        )
    }

    /// cli.md §4.1 step 2: whether to go on. Already configured (a `CANON_API_KEY` or
    /// `CANON_AGENT`, or credentials that resolve) asks "Reconfigure Canon?", default no.
    async fn wanted(&mut self) -> Result<bool, Stop> {
        let key = self.var("CANON_API_KEY").unwrap_or_default();
        let agent = self.var("CANON_AGENT").unwrap_or_default();
        self.console.secret(&key);
        let resolution = resolve_credentials(&self.inputs.lookup, None, &mut || self.load_agents());
        let resolves = match resolution {
            Ok(Resolution::Configured(credentials)) => {
                self.console.secret(credentials.api_key.expose());
                true
            }
            Ok(Resolution::Unconfigured) | Err(_) => false,
        };
        if key.is_empty() && agent.is_empty() && !resolves {
            return Ok(true);
        }
        self.console.blank();
        if agent.is_empty() {
            self.console.success("Canon is already configured.");
        } else {
            self.console.success(&format!(
                "Canon is already configured with profile '{agent}'."
            ));
        }
        if self.args.reconfigure {
            return Ok(true);
        }
        Ok(self.console.yes_no("  Reconfigure Canon?", false).await?)
    }

    /// A prompt, or the flag that answers it (taken as if it had been typed).
    async fn ask(
        &mut self,
        flag: Option<&str>,
        question: &str,
        default: Option<&str>,
    ) -> Result<String, Stop> {
        match flag {
            Some(value) => Ok(answer(value, default.filter(|d| !d.is_empty()))),
            None => Ok(self.console.prompt(question, default).await?),
        }
    }

    fn fail_warning(&mut self, text: &str) -> Stop {
        self.console.warning(text);
        Stop::Failed
    }

    fn fail_error(&mut self, text: &str) -> Stop {
        self.console.error(text);
        Stop::Failed
    }

    /// A failure cli.md §4 has no line for (as the reference's `Canon setup failed: <error>`).
    fn fail_unexpected(&mut self, error: &dyn std::fmt::Display) -> Stop {
        report(&self.console.redact(&format!("Canon setup failed: {error}")));
        Stop::Failed
    }

    /// cli.md §4.2: the environment and its four endpoints, resolved (§5.2) and verified (§5.3).
    async fn connection(&mut self) -> Result<Connection, Stop> {
        let args = self.args;
        let environment_default = self
            .var("CANON_ENVIRONMENT_ID")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_ENVIRONMENT_ID.to_owned());
        let environment_id = self
            .ask(
                args.environment_id.as_deref(),
                "  Canon environment ID",
                Some(&environment_default),
            )
            .await?;
        // Packaged environments prefill their endpoints; for another id only the environment
        // does (cli.md §4.2 [rec]).
        let packaged = packaged(&environment_id);
        let base_url = self
            .endpoint(
                args.base_url.as_deref(),
                "  Canon API base URL",
                "CANON_BASE_URL",
                packaged.map(|p| p.api_base_url.as_str()),
            )
            .await?;
        let stream_url = self
            .endpoint(
                args.stream_url.as_deref(),
                "  Canon stream URL",
                "CANON_STREAM_URL",
                packaged.map(|p| p.stream_url.as_str()),
            )
            .await?;
        let rtdb_url = self
            .endpoint(
                args.rtdb_url.as_deref(),
                "  Canon Realtime Database URL",
                "CANON_RTDB_URL",
                packaged.map(|p| p.rtdb_url.as_str()),
            )
            .await?;
        let firebase_api_key = self
            .endpoint(
                args.firebase_api_key.as_deref(),
                "  Canon Firebase web API key",
                "CANON_FIREBASE_API_KEY",
                packaged.map(|p| p.firebase_web_api_key.as_str()),
            )
            .await?;
        let given = |value: String| (!value.is_empty()).then_some(value);
        let overrides = ConnectionOverrides {
            base_url: given(base_url),
            stream_url: given(stream_url),
            rtdb_url: given(rtdb_url),
            firebase_api_key: given(firebase_api_key),
        };
        let verified = match resolve_connection(&environment_id, &overrides) {
            Ok(connection) => {
                self.console
                    .or_cancel(crate::canon::verify_connection(&connection))
                    .await?
            }
            Err(error) => Err(error.to_string()),
        };
        verified.map_err(|error| {
            self.fail_error(&format!("  Canon environment verification failed: {error}"))
        })
    }

    /// One endpoint prompt of cli.md §4.2: its default is `variable` (env, then `.env`), else
    /// the packaged value.
    async fn endpoint(
        &mut self,
        flag: Option<&str>,
        question: &str,
        variable: &str,
        packaged: Option<&str>,
    ) -> Result<String, Stop> {
        let default = self
            .var(variable)
            .filter(|value| !value.is_empty())
            .or_else(|| packaged.map(str::to_owned));
        self.ask(flag, question, default.as_deref()).await
    }

    /// cli.md §4.3: register or reconnect.
    async fn register(&mut self) -> Result<(), Stop> {
        let args = self.args;
        self.console.blank();
        let name = self
            .ask(args.name.as_deref(), "  Agent display name", Some("Hermes"))
            .await?;
        if name.is_empty() {
            return Err(self.fail_warning("  Skipped - Canon registration needs an agent name."));
        }
        let description = self
            .ask(
                args.description.as_deref(),
                "  Agent description",
                Some("Hermes gateway agent"),
            )
            .await?;
        let owner_phone = self
            .ask(
                args.owner_phone.as_deref(),
                "  Canon owner phone number (E.164, exact number from the Canon app)",
                None,
            )
            .await?;
        if owner_phone.is_empty() {
            return Err(
                self.fail_warning("  Skipped - Canon registration needs the owner's phone number.")
            );
        }
        let slug = profile_slug(&name);
        let profile = self
            .ask(
                args.local_profile.as_deref(),
                "  Local Canon profile name",
                Some(&slug),
            )
            .await?;
        if profile.is_empty() {
            return Err(
                self.fail_warning("  Skipped - Canon registration needs a local profile name.")
            );
        }
        let request = Request {
            name,
            description,
            owner_phone,
            profile,
        };
        let connection = self.connection().await?;
        let client = crate::canon::keyless_client(&connection)
            .map_err(|error| self.fail_unexpected(&error))?;
        let ticket = self.submit(&request, &connection, &client).await?;
        self.console
            .info("  Approve the request in the Canon app. Waiting up to 5 minutes...");
        let verdict = approval::wait(&mut self.console, &client, &ticket, args.timing()).await?;
        match verdict {
            Verdict::Failed(error) => {
                Err(self.fail_error(&format!("  Canon approval polling failed: {error}")))
            }
            Verdict::Rejected => {
                self.clear_pending(&request.profile)?;
                Err(self.fail_warning("  Canon registration was rejected."))
            }
            Verdict::TimedOut => {
                Err(self.fail_warning("  Canon registration timed out. Run setup again to retry."))
            }
            Verdict::Approved(status) => {
                self.save_approved(&request, &connection, &client, &ticket, &status)
                    .await
            }
        }
    }

    /// The agent id to ask for (cli.md §4.3 step 3): `--agent-id`, else the `agentId` of the
    /// `agents.json` profile of that name (an unreadable file means none).
    fn requested_agent_id(&self, profile: &str) -> Option<String> {
        if let Some(id) = self.args.agent_id.as_deref().map(str::trim) {
            if !id.is_empty() {
                return Some(id.to_owned());
            }
        }
        let profiles = self.load_agents().ok()?;
        profiles
            .get(profile)?
            .get("agentId")?
            .as_str()
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
    }

    /// cli.md §4.3 steps 4–5: the pending registration, bound to `connection`, then resumed or
    /// submitted.
    async fn submit(
        &mut self,
        request: &Request,
        connection: &Connection,
        client: &CanonClient,
    ) -> Result<RegistrationTicket, Stop> {
        let profile = request.profile.as_str();
        let pending_path = self.inputs.paths.pending.clone();
        let bound = (|| {
            let mut pending = PendingRegistrations::read(&pending_path)?;
            if pending.ensure_local_registration_id(profile, random_u128()) {
                pending.save()?;
            }
            pending.bind(profile, connection)?;
            pending.save()?;
            Ok::<_, StoreError>(pending)
        })();
        let mut pending = bound.map_err(|error| {
            self.fail_error(&format!("  Could not resume Canon registration: {error}"))
        })?;
        if let Some(ticket) = pending.ticket(profile) {
            if let Some(token) = &ticket.poll_token {
                self.console.secret(token);
            }
            self.console.info(&format!(
                "  Reconnecting to pending registration (request ID: {}).",
                ticket.request_id
            ));
            return Ok(ticket);
        }
        let local_registration_id = pending
            .get(profile)
            .and_then(|entry| entry.get("localRegistrationId"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let registration = Registration {
            name: request.name.clone(),
            description: request.description.clone(),
            owner_phone: request.owner_phone.clone(),
            developer_info: DEVELOPER_INFO.to_owned(),
            client_type: HERMES_CLIENT_TYPE.to_owned(),
            local_registration_id,
            requested_agent_id: self.requested_agent_id(profile),
        };
        let ticket = match self
            .console
            .or_cancel(client.register(&registration))
            .await?
        {
            Ok(ticket) => ticket,
            Err(error) => {
                return Err(self.fail_error(&format!("  Canon registration failed: {error}")))
            }
        };
        if let Some(token) = &ticket.poll_token {
            self.console.secret(token);
        }
        pending.record_submission(profile, &ticket, &utc_seconds(now_secs()));
        pending
            .save()
            .map_err(|error| self.fail_unexpected(&error))?;
        self.console.success(&format!(
            "  Registration submitted (request ID: {}).",
            ticket.request_id
        ));
        Ok(ticket)
    }

    /// Deletes the pending registration of `profile` (cli.md §4.3 steps 7 and 11).
    fn clear_pending(&mut self, profile: &str) -> Result<(), Stop> {
        let cleared = PendingRegistrations::read(&self.inputs.paths.pending).and_then(|mut p| {
            if p.remove(profile) {
                p.save()?;
            }
            Ok(())
        });
        cleared.map_err(|error| self.fail_unexpected(&error))
    }

    /// cli.md §4.3 steps 8–12. From here on SIGINT no longer cancels: the key is being saved.
    async fn save_approved(
        &mut self,
        request: &Request,
        connection: &Connection,
        client: &CanonClient,
        ticket: &RegistrationTicket,
        status: &RegistrationStatus,
    ) -> Result<(), Stop> {
        let api_key = status
            .api_key
            .as_ref()
            .map(|key| key.expose().trim().to_owned())
            .unwrap_or_default();
        let agent_id = status.agent_id.as_deref().unwrap_or_default().trim();
        self.console.secret(&api_key);
        if api_key.is_empty() || agent_id.is_empty() {
            return Err(self
                .fail_error("  Canon approved the request but did not return a usable API key."));
        }
        let agent_name = status
            .agent_name
            .as_deref()
            .unwrap_or(&request.name)
            .trim()
            .to_owned();
        let profile = request.profile.as_str();
        let entry = hermes_profile_entry(
            &ApiKey::new(api_key),
            agent_id,
            &agent_name,
            &utc_seconds(now_secs()),
            connection,
        );
        let saved = self.load_agents().and_then(|mut profiles| {
            profiles.insert(profile, entry);
            profiles.save()
        });
        if let Err(error) = saved {
            return Err(self.fail_error(&format!("  Could not save Canon profile: {error}")));
        }
        if let Err(error) = client.ack_registration(ticket).await {
            self.console.warning(&format!(
                "  Canon profile saved, but key-delivery ack failed: {error}"
            ));
        }
        let mut remove = vec!["CANON_API_KEY"];
        remove.extend(CONNECTION_KEYS);
        let edited = self.edit_env(&[("CANON_AGENT", profile)], &remove);
        self.clear_pending(profile)?;
        edited?;
        self.console.success(&format!(
            "  Canon agent '{agent_name}' saved as profile '{profile}'."
        ));
        self.console
            .info("  Hermes will use CANON_AGENT for the Canon platform.");
        Ok(())
    }

    /// cli.md §4.4: an existing profile of `agents.json`.
    async fn existing(&mut self) -> Result<(), Stop> {
        let profiles = match self.load_agents() {
            Ok(profiles) => profiles,
            Err(error) => {
                let path = self.inputs.paths.agents.display().to_string();
                return Err(self.fail_error(&format!("  Could not read {path}: {error}")));
            }
        };
        let candidates = profiles.hermes_candidates();
        let current = self.var("CANON_AGENT").unwrap_or_default();
        let default = if candidates.contains(&current) {
            Some(current)
        } else {
            candidates.first().cloned()
        };
        let name = match self.args.existing.as_deref() {
            Some(flag) => answer(flag, default.as_deref()),
            None => {
                if candidates.is_empty() {
                    self.console
                        .warning("  No Hermes-compatible profiles found in ~/.canon/agents.json.");
                }
                self.console
                    .prompt("  Canon profile", default.as_deref())
                    .await?
            }
        };
        if name.is_empty() {
            return Err(self.fail_warning("  Skipped - Canon needs a profile name."));
        }
        match profile_credentials(&profiles, &name, false) {
            Ok(credentials) => self.console.secret(credentials.api_key.expose()),
            Err(CredentialError::ProfileNotFound { path, .. }) => {
                return Err(self.fail_error(&format!("  Profile '{name}' was not found in {path}.")))
            }
            Err(error) => {
                return Err(self.fail_error(&format!("  Profile '{name}' is not usable: {error}")))
            }
        }
        self.edit_env(&[("CANON_AGENT", &name)], &["CANON_API_KEY"])?;
        self.console
            .success(&format!("  Canon profile '{name}' saved."));
        Ok(())
    }

    /// cli.md §4.5: a raw API key and its verified connection.
    async fn raw_key(&mut self) -> Result<(), Stop> {
        self.console.blank();
        self.console
            .info("  Use this only for headless deployments that cannot use a saved profile.");
        let key = match self.args.api_key_env.as_deref() {
            Some(variable) => answer(&std::env::var(variable).unwrap_or_default(), None),
            None => self.console.secret_prompt("  Canon API key").await?,
        };
        self.console.secret(&key);
        if key.is_empty() {
            return Err(self.fail_warning("  Skipped - Canon needs CANON_API_KEY or CANON_AGENT."));
        }
        let connection = self.connection().await?;
        let set = [
            ("CANON_API_KEY", key.as_str()),
            ("CANON_ENVIRONMENT_ID", connection.environment_id.as_str()),
            ("CANON_BASE_URL", connection.base_url.as_str()),
            ("CANON_STREAM_URL", connection.stream_url.as_str()),
            ("CANON_RTDB_URL", connection.rtdb_url.as_str()),
            (
                "CANON_FIREBASE_API_KEY",
                connection.firebase_api_key.as_str(),
            ),
        ];
        self.edit_env(&set, &["CANON_AGENT"])?;
        self.console.success("  Canon API key saved.");
        Ok(())
    }

    /// Sets and removes `.env` keys through Hermes' own functions (the `env.set` helper); the
    /// values travel on the helper's stdin, never in its argv.
    fn edit_env(&mut self, set: &[(&str, &str)], remove: &[&str]) -> Result<(), Stop> {
        let set: Map<String, Value> = set
            .iter()
            .map(|(key, value)| ((*key).to_owned(), Value::from(*value)))
            .collect();
        let body = json!({"set": set, "remove": remove});
        match self.inputs.helpers.call("env.set", body) {
            Ok(_) => Ok(()),
            Err(error) => {
                let path = self.inputs.env_file.display().to_string();
                Err(self.fail_error(&format!("  Could not update {path}: {error:#}")))
            }
        }
    }
}

/// Seconds since the Unix epoch (0 before it).
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// 128 random bits for a `localRegistrationId` (the kernel's `getrandom`; should it fail, the
/// standard library's per-process random hasher keys and the clock, which still make the id
/// unique on this machine).
fn random_u128() -> u128 {
    let mut bytes = [0u8; 16];
    if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())
        .is_ok_and(|filled| filled == bytes.len())
    {
        return u128::from_le_bytes(bytes);
    }
    use std::hash::{BuildHasher as _, Hasher as _};
    let half = |salt: u64| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(salt);
        hasher.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_nanos()),
        );
        hasher.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}
