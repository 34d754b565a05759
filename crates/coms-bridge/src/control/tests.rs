//! Controller tests with scripted Hermes and Herdr fakes (coms-bridge.md §12.3).

use std::collections::VecDeque;
use std::path::Path;

use serde_json::json;

use super::*;

/// A scripted program: each call is recorded; the reply is the first rule whose key prefixes
/// the space-joined arguments.
#[derive(Default)]
struct Script {
    rules: Vec<(String, Result<String, String>)>,
    calls: Vec<Vec<String>>,
    queued: VecDeque<(String, Result<String, String>)>,
}

impl Script {
    fn on(mut self, key: &str, reply: &str) -> Self {
        self.rules.push((key.into(), Ok(reply.into())));
        self
    }

    fn fail(mut self, key: &str, error: &str) -> Self {
        self.rules.push((key.into(), Err(error.into())));
        self
    }

    fn joined(&self) -> Vec<String> {
        self.calls.iter().map(|c| c.join(" ")).collect()
    }
}

impl Runner for Script {
    fn run(&mut self, args: &[String]) -> Result<String, String> {
        self.calls.push(args.to_vec());
        let line = args.join(" ");
        if let Some(at) = self
            .queued
            .iter()
            .position(|(k, _)| line.starts_with(k.as_str()))
        {
            return self.queued.remove(at).expect("present").1;
        }
        self.rules
            .iter()
            .find(|(key, _)| line.starts_with(key.as_str()))
            .map(|(_, reply)| reply.clone())
            .unwrap_or_else(|| Err(format!("unexpected call: {line}")))
    }
}

const ONE_RUNNING: &str = "Gateways:\n  ✓ default (current) — PID 4242\n  ✗ dev — not running\n";
const TOOLS_ON: &str = "  ✓ enabled  terminal  Terminal\n  ✓ enabled  file  Files\n";
const TOOLS_TERMINAL_OFF: &str = "  ✗ disabled  terminal  Terminal\n  ✓ enabled  file  Files\n";
const SKILL_ON: &str = "  hub-liaison   local   enabled\n";

fn hermes_for(profile_dir: &Path, gateways: &str, tools: &str) -> Script {
    Script::default()
        .on("gateway list", gateways)
        .on(
            "profile show default",
            &format!("Profile: default\nPath: {}\n", profile_dir.display()),
        )
        .on("--profile default skills list --enabled-only", SKILL_ON)
        .on("--profile default tools list --platform telegram", tools)
        .on("--profile default gateway restart", "")
}

struct Fixture {
    _dir: tempfile::TempDir,
    profile: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let profile = dir.path().join("hermes-home");
    std::fs::create_dir(&profile).expect("profile dir");
    Fixture { _dir: dir, profile }
}

fn skill() -> SkillTree {
    SkillTree::new(vec![("SKILL.md".into(), b"packaged".to_vec())])
}

fn installed(profile: &Path) -> PathBuf {
    profile.join("skills").join("hub-liaison")
}

fn put_skill(profile: &Path, content: &str) {
    std::fs::create_dir_all(installed(profile)).expect("mkdir");
    std::fs::write(installed(profile).join("SKILL.md"), content).expect("write");
}

fn put_packaged(profile: &Path) {
    std::fs::create_dir(profile.join("skills")).expect("mkdir");
    skill().write_to(&installed(profile)).expect("install");
}

/// 2026-07-24T12:34:56.000Z.
const FIXED_NOW: u64 = 1_784_896_496_000;

fn run_with(
    hermes: &mut Script,
    herdr: &mut Script,
    request: &Request,
    pane: Option<&str>,
) -> Result<Outcome, ControlError> {
    let mut ctx = Context {
        hermes,
        herdr,
        executable: PathBuf::from("/opt/bin/coms-hermes-bridge"),
        pane_id: pane.map(Into::into),
        pi_coms_project: None,
        cwd: PathBuf::from("/own/cwd"),
        now_ms: FIXED_NOW,
        nonce: "n0nce".into(),
        skill: skill(),
    };
    run(request, &mut ctx)
}

fn request(words: &[&str], profile: Option<&str>, force: bool, restart: bool) -> Request {
    let positionals: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
    parse_request(&positionals, profile, force, restart).expect("valid request")
}

fn parse(words: &[&str]) -> Result<Request, ControlError> {
    let positionals: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
    parse_request(&positionals, None, false, false)
}

#[test]
fn parser_accepts_the_four_forms_and_rejects_the_rest() {
    assert_eq!(parse(&["install"]).expect("ok").action, Action::Install);
    assert_eq!(parse(&["status"]).expect("ok").action, Action::Status);
    assert_eq!(
        parse(&["on", "7883056502"]).expect("ok").target.as_deref(),
        Some("telegram:7883056502")
    );
    assert_eq!(
        parse(&["off", "7883056502:1735"])
            .expect("ok")
            .target
            .as_deref(),
        Some("telegram:7883056502:1735")
    );
    let shape = "Expected install, status, or an on/off action with one Telegram ID.";
    for bad in [
        &[][..],
        &["install", "extra"],
        &["start", "123"],
        &["off", "123", "extra"],
        &["on"],
    ] {
        let error = parse(bad).expect_err("usage");
        assert_eq!(error, ControlError::Usage(shape.into()), "{bad:?}");
        assert!(error
            .to_string()
            .contains("\nUsage:\n  coms-hermes-bridge set-hermes-telegram install"));
    }
    let id = "Telegram ID must be digits, optionally followed by a colon and a numeric topic ID.";
    for bad in [
        "telegram:123",
        "123:",
        ":123",
        "123:456:789",
        "12a",
        "1 2",
        "-100",
        "+1",
        "",
    ] {
        assert_eq!(
            parse(&["on", bad]),
            Err(ControlError::Usage(id.into())),
            "{bad}"
        );
    }
    let positionals = vec!["status".to_owned()];
    assert_eq!(
        parse_request(&positionals, Some("  dev "), false, false)
            .expect("ok")
            .profile
            .as_deref(),
        Some("dev")
    );
    assert_eq!(
        parse_request(&positionals, Some("  "), false, false)
            .expect("ok")
            .profile,
        None
    );
}

#[test]
fn force_and_restart_are_for_install_only() {
    let message = ControlError::Usage("--force and --restart are valid only with install.".into());
    let status = vec!["status".to_owned()];
    let off = vec!["off".to_owned(), "123".to_owned()];
    assert_eq!(
        parse_request(&status, None, true, false),
        Err(message.clone())
    );
    assert_eq!(parse_request(&off, None, false, true), Err(message));
    let install = vec!["install".to_owned()];
    assert!(parse_request(&install, None, true, true).is_ok());
}

#[test]
fn status_infers_the_single_running_gateway_reports_drift_and_writes_nothing() {
    let f = fixture();
    put_skill(&f.profile, "an older copy");
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let mut herdr = Script::default();
    let outcome = run_with(
        &mut hermes,
        &mut herdr,
        &request(&["status"], None, false, false),
        None,
    )
    .expect("status");
    let Outcome::Status(inspection) = &outcome else {
        panic!("status")
    };
    assert_eq!(inspection.profile, "default");
    assert_eq!(inspection.skill_state, SkillState::Drifted);
    assert!(
        inspection.skill_enabled
            && inspection.terminal
            && inspection.file
            && inspection.gateway_running
    );
    assert!(!inspection.ready());
    assert_eq!(
        outcome.render(),
        format!(
            "Hermes Telegram status (default)\n  profile: {}\n  gateway: running\n  hub-liaison: drifted, enabled\n  Telegram tools: terminal=enabled, file=enabled\n  ready: no\n  next: coms-hermes-bridge set-hermes-telegram install --profile default --force\n",
            f.profile.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(installed(&f.profile).join("SKILL.md")).expect("read"),
        "an older copy"
    );
    assert!(!f.profile.join("backups").exists());
    assert!(hermes
        .joined()
        .iter()
        .all(|c| !c.contains("restart") && !c.contains("start") && !c.contains("enable ")));
    assert!(herdr.calls.is_empty());
}

#[test]
fn two_running_gateways_without_a_profile_fail_closed() {
    let f = fixture();
    let two = "  ✓ default — PID 1\n  ✓ work — PID 2\n";
    let mut hermes = hermes_for(&f.profile, two, TOOLS_ON);
    let error = run_with(
        &mut hermes,
        &mut Script::default(),
        &request(&["status"], None, false, false),
        None,
    )
    .expect_err("ambiguous")
    .to_string();
    assert!(
        error.contains("exactly one running gateway") && error.contains("--profile"),
        "{error}"
    );
    assert!(error.contains("found 2"), "{error}");
    let mut none = hermes_for(&f.profile, "  ✗ default — not running\n", TOOLS_ON);
    let error = run_with(
        &mut none,
        &mut Script::default(),
        &request(&["install"], None, false, false),
        None,
    )
    .expect_err("none")
    .to_string();
    assert!(error.contains("found 0"), "{error}");
    assert!(!f.profile.join("skills").exists(), "nothing written");
}

#[test]
fn profile_names_and_descriptions_are_checked() {
    let f = fixture();
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let error = run_with(
        &mut hermes,
        &mut Script::default(),
        &request(&["status"], Some("Bad.Name"), false, false),
        None,
    )
    .expect_err("invalid");
    assert_eq!(error.to_string(), r#"Invalid Hermes profile: "Bad.Name""#);
    let mut wrong = Script::default()
        .on("gateway list", ONE_RUNNING)
        .on("profile show default", "Profile: other\nPath: /x\n");
    let error = run_with(
        &mut wrong,
        &mut Script::default(),
        &request(&["status"], Some("default"), false, false),
        None,
    )
    .expect_err("invalid description");
    assert_eq!(
        error.to_string(),
        "Hermes returned an invalid profile description for default"
    );
    let missing = f.profile.join("nope");
    let mut gone = hermes_for(&missing, ONE_RUNNING, TOOLS_ON);
    let error = run_with(
        &mut gone,
        &mut Script::default(),
        &request(&["status"], None, false, false),
        None,
    )
    .expect_err("missing dir");
    assert_eq!(
        error.to_string(),
        format!(
            "unsafe or missing Hermes profile directory: {}",
            missing.display()
        )
    );
    let link = f.profile.with_file_name("link");
    std::os::unix::fs::symlink(&f.profile, &link).expect("symlink");
    let mut linked = hermes_for(&link, ONE_RUNNING, TOOLS_ON);
    let error = run_with(
        &mut linked,
        &mut Script::default(),
        &request(&["status"], None, false, false),
        None,
    )
    .expect_err("symlinked dir");
    assert!(error
        .to_string()
        .starts_with("unsafe or missing Hermes profile directory"));
    let mut broken = Script::default().fail("gateway list", "hermes: not configured");
    let error = run_with(
        &mut broken,
        &mut Script::default(),
        &request(&["status"], None, false, false),
        None,
    )
    .expect_err("hermes failed");
    assert_eq!(error.to_string(), "hermes: not configured");
}

#[test]
fn drift_without_force_is_refused_and_changes_nothing() {
    let f = fixture();
    put_skill(&f.profile, "an older copy");
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let error = run_with(
        &mut hermes,
        &mut Script::default(),
        &request(&["install"], None, false, false),
        None,
    )
    .expect_err("drift")
    .to_string();
    assert!(error.contains("--force"), "{error}");
    assert!(error.starts_with(
        "hub-liaison differs from the packaged coms-hermes-bridge version in profile default"
    ));
    assert_eq!(
        std::fs::read_to_string(installed(&f.profile).join("SKILL.md")).expect("read"),
        "an older copy"
    );
    assert!(!f.profile.join("backups").exists());
}

#[test]
fn a_symlinked_skills_directory_is_refused() {
    let f = fixture();
    let elsewhere = f.profile.with_file_name("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::os::unix::fs::symlink(&elsewhere, f.profile.join("skills")).expect("symlink");
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let error = run_with(
        &mut hermes,
        &mut Script::default(),
        &request(&["install"], None, false, false),
        None,
    )
    .expect_err("unsafe")
    .to_string();
    assert!(error.contains("unsafe Hermes directory"), "{error}");
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("dir").count(),
        0,
        "nothing written through the link"
    );
}

#[test]
fn forced_install_backs_up_replaces_and_restarts_on_request() {
    let f = fixture();
    put_skill(&f.profile, "an older copy");
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let outcome = run_with(
        &mut hermes,
        &mut Script::default(),
        &request(&["install"], None, true, true),
        None,
    )
    .expect("install");
    let Outcome::Install(report) = &outcome else {
        panic!("install")
    };
    assert!(report.changed && report.restarted && !report.restart_required && report.ready);
    let backup = f
        .profile
        .join("backups/agent-fleet/hub-liaison-2026-07-24T12-34-56-000Z");
    assert_eq!(report.backup_dir.as_deref(), Some(backup.as_path()));
    assert_eq!(
        std::fs::read_to_string(backup.join("SKILL.md")).expect("backup"),
        "an older copy"
    );
    assert_eq!(
        std::fs::read_to_string(installed(&f.profile).join("SKILL.md")).expect("new"),
        "packaged"
    );
    assert!(hermes.calls.contains(
        &["--profile", "default", "gateway", "restart"]
            .map(String::from)
            .to_vec()
    ));
    let leftovers: Vec<_> = std::fs::read_dir(f.profile.join("skills"))
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, ["hub-liaison"], "no temp tree left");
    assert_eq!(
        outcome.render(),
        format!(
            "✓ hub-liaison is current in Hermes profile default.\n  installed packaged coms-hermes-bridge copy\n  backup: {}\n  gateway: running\n  Telegram tools: terminal=enabled, file=enabled\n  gateway restarted by explicit --restart\n  ready: yes\n",
            backup.display()
        )
    );
}

#[test]
fn a_missing_skill_installs_without_force_and_restarts_only_when_asked() {
    let f = fixture();
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let outcome = run_with(
        &mut hermes,
        &mut Script::default(),
        &request(&["install"], Some("default"), false, false),
        None,
    )
    .expect("install");
    let Outcome::Install(report) = &outcome else {
        panic!("install")
    };
    assert!(report.changed && !report.restarted && report.restart_required);
    assert_eq!(report.backup_dir, None);
    assert!(hermes.joined().iter().all(|c| !c.contains("restart")));
    assert!(outcome.render().contains("  restart required: hermes --profile default gateway restart\n  ready: pending actions above\n"));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(f.profile.join("skills"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);

    let mut again = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let outcome = run_with(
        &mut again,
        &mut Script::default(),
        &request(&["install"], None, false, true),
        None,
    )
    .expect("again");
    let Outcome::Install(report) = &outcome else {
        panic!("install")
    };
    assert!(!report.changed && report.restarted && !report.restart_required);
    assert!(outcome.render().contains("  no skill files changed\n"));
}

#[test]
fn install_never_starts_a_stopped_gateway_or_enables_anything() {
    let f = fixture();
    let stopped = "  ✗ default — not running\n";
    let mut hermes = hermes_for(&f.profile, stopped, TOOLS_TERMINAL_OFF)
        .on("--profile default skills list --enabled-only", "");
    hermes.rules.swap(2, 5);
    let outcome = run_with(
        &mut hermes,
        &mut Script::default(),
        &request(&["install"], Some("default"), false, true),
        None,
    )
    .expect("install");
    let Outcome::Install(report) = &outcome else {
        panic!("install")
    };
    assert!(!report.restarted && !report.restart_required && !report.ready);
    let text = outcome.render();
    assert!(
        text.contains(
            "  action required: enable hub-liaison with: hermes --profile default skills config\n"
        ),
        "{text}"
    );
    assert!(text.contains("  action required: hermes --profile default tools enable --platform telegram terminal file\n"));
    assert!(text.contains("  action required: hermes --profile default gateway start\n"));
    assert!(text.ends_with("  ready: pending actions above\n"));
    let calls = hermes.joined();
    assert!(
        calls.iter().all(|c| !c.contains("gateway start")
            && !c.contains("restart")
            && !c.contains("enable ")),
        "{calls:?}"
    );
}

#[test]
fn on_refuses_before_any_herdr_call_when_not_ready() {
    let f = fixture();
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_TERMINAL_OFF);
    let mut herdr = Script::default();
    let error = run_with(
        &mut hermes,
        &mut herdr,
        &request(&["on", "7883056502"], None, false, false),
        Some("w7:p1"),
    )
    .expect_err("not ready")
    .to_string();
    assert!(error.contains("terminal/file tools"), "{error}");
    assert_eq!(
        error,
        "hub-liaison is missing; Telegram terminal/file tools are not both enabled. Run: coms-hermes-bridge set-hermes-telegram install --profile default"
    );
    assert!(herdr.calls.is_empty());
    let error = run_with(
        &mut hermes,
        &mut herdr,
        &request(&["on", "1"], None, false, false),
        None,
    )
    .expect_err("no pane")
    .to_string();
    assert_eq!(
        error,
        "HERDR_PANE_ID is required; run this command inside a Herdr pane"
    );
}

fn herdr_workspace(existing_bridge: bool) -> Script {
    let panes = if existing_bridge {
        json!({"result": {"panes": [
            {"pane_id": "w7:p1", "label": "hub"},
            {"pane_id": "w7:p4", "label": "hermes-bridge"},
            {"pane_id": "w7:p5", "label": "other"},
        ]}})
    } else {
        json!({"result": {"panes": [{"pane_id": "w7:p1", "label": "hub"}]}})
    };
    Script::default()
        .on("pane get w7:p1", &json!({"result": {"pane": {"workspace_id": "w7", "cwd": "/repo/acme"}}}).to_string())
        .on(
            "pane process-info --pane w7:p1",
            &json!({"result": {"process_info": {"foreground_processes": [{"argv": ["pi", "--project", "acme.prod"]}]}}}).to_string(),
        )
        .on("pane list --workspace w7", &panes.to_string())
        .on("pane close", "")
        .on("pane split", &json!({"result": {"pane": {"pane_id": "w7:p9"}}}).to_string())
        .on("pane rename", "")
        .on("pane run", "")
}

#[test]
fn on_replaces_the_bridge_pane_and_starts_the_daemon() {
    let f = fixture();
    put_packaged(&f.profile);
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let mut herdr = herdr_workspace(true);
    let outcome = run_with(
        &mut hermes,
        &mut herdr,
        &request(&["on", "7883056502:1735"], None, false, false),
        Some("w7:p1"),
    )
    .expect("on");
    let Outcome::On(report) = &outcome else {
        panic!("on")
    };
    assert_eq!(
        report,
        &OnReport {
            hermes_profile: "default".into(),
            pane_id: "w7:p9".into(),
            project: "acme.prod".into(),
            target: "telegram:7883056502:1735".into(),
            workspace: "w7".into(),
            closed: vec!["w7:p4".into()],
        }
    );
    let calls = herdr.joined();
    assert_eq!(calls[3], "pane close w7:p4");
    assert_eq!(
        calls[4],
        "pane split w7:p1 --direction right --ratio 0.3 --cwd /repo/acme --no-focus"
    );
    assert_eq!(calls[5], "pane rename w7:p9 hermes-bridge");
    let run = &herdr.calls[6];
    assert_eq!(run[..3], ["pane", "run", "w7:p9"]);
    assert_eq!(
        run[3],
        "'/opt/bin/coms-hermes-bridge' --project 'acme.prod' --hermes-profile 'default' --timeout 1800000 --to 'telegram:7883056502:1735'"
    );
    assert_eq!(calls.len(), 7);
    assert_eq!(
        outcome.render(),
        "✓ Hermes Telegram bridge is on: telegram:7883056502:1735\n  project: acme.prod\n  Hermes profile: default\n  workspace: w7\n  pane: w7:p9 (hermes-bridge)\n"
    );
}

#[test]
fn on_closes_the_new_pane_when_starting_it_fails() {
    let f = fixture();
    put_packaged(&f.profile);
    let mut hermes = hermes_for(&f.profile, ONE_RUNNING, TOOLS_ON);
    let mut herdr = herdr_workspace(false);
    herdr
        .queued
        .push_back(("pane run".into(), Err("herdr: pane gone".into())));
    let error = run_with(
        &mut hermes,
        &mut herdr,
        &request(&["on", "1"], None, false, false),
        Some("w7:p1"),
    )
    .expect_err("run failed");
    assert_eq!(error.to_string(), "herdr: pane gone");
    assert_eq!(
        herdr.joined().last().map(String::as_str),
        Some("pane close w7:p9")
    );
}

#[test]
fn off_needs_no_hermes_and_closes_the_bridge_panes() {
    let mut hermes = Script::default();
    let mut herdr = herdr_workspace(true);
    let outcome = run_with(
        &mut hermes,
        &mut herdr,
        &request(&["off", "7883056502"], None, false, false),
        Some("w7:p1"),
    )
    .expect("off");
    assert!(hermes.calls.is_empty());
    let Outcome::Off(report) = &outcome else {
        panic!("off")
    };
    assert_eq!(report.closed, ["w7:p4"]);
    assert_eq!(report.project, "acme.prod");
    assert!(herdr
        .joined()
        .iter()
        .all(|c| !c.starts_with("pane split") && !c.starts_with("pane run")));
    assert_eq!(
        outcome.render(),
        "✓ Hermes Telegram bridge is off in w7 (closed w7:p4).\n"
    );
    let mut herdr = herdr_workspace(false);
    let outcome = run_with(
        &mut hermes,
        &mut herdr,
        &request(&["off", "1"], None, false, false),
        Some("w7:p1"),
    )
    .expect("off");
    assert_eq!(
        outcome.render(),
        "✓ Hermes Telegram bridge is already off in w7.\n"
    );
}

#[test]
fn herdr_output_and_project_inference() {
    let mut hermes = Script::default();
    // Empty stdout is an empty result: no workspace.
    let mut empty = Script::default().on("pane get", "");
    let error = run_with(
        &mut hermes,
        &mut empty,
        &request(&["off", "1"], None, false, false),
        Some("w7:p1"),
    )
    .expect_err("no ws");
    assert_eq!(
        error.to_string(),
        "cannot resolve workspace for current pane w7:p1"
    );
    let mut garbage = Script::default().on("pane get", "not json");
    let error = run_with(
        &mut hermes,
        &mut garbage,
        &request(&["off", "1"], None, false, false),
        Some("w7:p1"),
    )
    .expect_err("bad json");
    assert_eq!(
        error.to_string(),
        "herdr returned invalid JSON for pane get"
    );

    let infer = |env: Option<&str>, processes: serde_json::Value| {
        let mut herdr = Script::default()
            .on(
                "pane get",
                &json!({"result": {"pane": {"workspace_id": "w7"}}}).to_string(),
            )
            .on(
                "pane process-info",
                &json!({"result": {"process_info": {"foreground_processes": processes}}})
                    .to_string(),
            )
            .on("pane list", "");
        let mut hermes = Script::default();
        let mut ctx = Context {
            hermes: &mut hermes,
            herdr: &mut herdr,
            executable: PathBuf::from("/x"),
            pane_id: Some("w7:p1".into()),
            pi_coms_project: env.map(Into::into),
            cwd: PathBuf::from("/"),
            now_ms: 0,
            nonce: "n".into(),
            skill: skill(),
        };
        run(&request(&["off", "1"], None, false, false), &mut ctx).map(|o| match o {
            Outcome::Off(r) => r.project,
            _ => unreachable!("off"),
        })
    };
    assert_eq!(
        infer(
            Some("env-proj"),
            json!([{"argv": ["pi", "--project", "af"]}, {"argv": ["--project=later"]}])
        ),
        Ok("af".into())
    );
    assert_eq!(infer(Some(" env-proj "), json!([])), Ok("env-proj".into()));
    assert_eq!(infer(None, json!([])), Ok("default".into()));
    let error =
        infer(None, json!([{"argv": ["pi", "--project", "../bad"]}])).expect_err("bad project");
    assert_eq!(
        error.to_string(),
        r#"Invalid project inferred from the current pane: "../bad""#
    );
}

#[test]
fn shell_quoting() {
    assert_eq!(shell_quote("plain"), "'plain'");
    assert_eq!(shell_quote("it's"), "'it'\"'\"'s'");
}
