//! The location rules of cli.md §2.1 and §2.2 on scratch directories, and the helpers of
//! cli.md §2.3 in the real hermes-agent 0.19.0 venv (`.cache/hermes-venv`, or `HERMES_VENV`).

use std::fs;
use std::os::unix::fs::PermissionsExt as _;

use super::*;

/// A scratch `HOME` with `~/.hermes` and a profile `work` in it.
fn scratch() -> (tempfile::TempDir, HostEnv) {
    let dir = tempfile::tempdir().expect("scratch dir");
    fs::create_dir_all(dir.path().join(".hermes/profiles/work")).expect("profiles");
    let env = HostEnv {
        home: Some(dir.path().to_path_buf()),
        ..HostEnv::default()
    };
    (dir, env)
}

fn located(flag: Option<&str>, env: &HostEnv) -> (String, PathBuf) {
    let profile = locate_profile(flag, env).expect("a profile");
    (profile.name, profile.home)
}

#[test]
fn default_profile_is_the_native_home() {
    let (dir, env) = scratch();
    let hermes = dir.path().join(".hermes");
    assert_eq!(located(None, &env), ("default".into(), hermes.clone()));
    assert_eq!(located(Some("Default"), &env), ("default".into(), hermes));
}

#[test]
fn profile_flag_names_a_directory_under_profiles() {
    let (dir, env) = scratch();
    let work = dir.path().join(".hermes/profiles/work");
    assert_eq!(located(Some(" WORK "), &env), ("work".into(), work));
    let error = locate_profile(Some("play"), &env).expect_err("missing");
    assert_eq!(
        error.to_string(),
        "Profile 'play' does not exist. Create it with: hermes profile create play"
    );
    let error = locate_profile(Some("bad name"), &env).expect_err("invalid");
    assert_eq!(
        error.to_string(),
        "Invalid profile name 'bad name'. Must match [a-z0-9][a-z0-9_-]{0,63}"
    );
    assert!(locate_profile(Some("test"), &env)
        .expect_err("reserved")
        .to_string()
        .starts_with("Profile name 'test' is reserved"));
}

#[test]
fn hermes_home_in_a_profiles_directory_wins_over_active_profile() {
    let (dir, mut env) = scratch();
    let hermes = dir.path().join(".hermes");
    fs::write(hermes.join("active_profile"), "work\n").expect("sticky");
    assert_eq!(
        located(None, &env),
        ("work".into(), hermes.join("profiles/work"))
    );
    fs::create_dir_all(hermes.join("profiles/other")).expect("other");
    env.hermes_home = Some(hermes.join("profiles/other"));
    assert_eq!(
        located(None, &env),
        ("other".into(), hermes.join("profiles/other"))
    );
    env.hermes_home = Some(hermes.join("profiles/gone"));
    assert_eq!(
        locate_profile(None, &env).expect_err("missing").to_string(),
        "Profile 'gone' does not exist. Create it with: hermes profile create gone"
    );
}

#[test]
fn active_profile_is_ignored_for_a_supervised_child_and_when_default() {
    let (dir, mut env) = scratch();
    let hermes = dir.path().join(".hermes");
    fs::write(hermes.join("active_profile"), "default\n").expect("sticky");
    assert_eq!(located(None, &env).0, "default");
    fs::write(hermes.join("active_profile"), "work\nignored\n").expect("sticky");
    env.s6_child = true;
    assert_eq!(located(None, &env), ("default".into(), hermes));
}

#[test]
fn a_custom_hermes_home_is_its_own_root() {
    let (dir, mut env) = scratch();
    let data = dir.path().join("data");
    fs::create_dir_all(data.join("profiles/coder")).expect("profiles");
    env.hermes_home = Some(data.clone());
    assert_eq!(located(None, &env), ("default".into(), data.clone()));
    assert_eq!(
        located(Some("coder"), &env),
        ("coder".into(), data.join("profiles/coder"))
    );
    fs::write(data.join("active_profile"), "coder").expect("sticky");
    assert_eq!(located(None, &env).0, "coder");
    // Under ~/.hermes but not a profile directory: Hermes calls it `custom`.
    env.hermes_home = Some(dir.path().join(".hermes/elsewhere"));
    fs::remove_file(data.join("active_profile")).expect("unstick");
    assert_eq!(located(None, &env).0, "custom");
}

fn executable(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    fs::write(path, text).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn python_comes_from_the_flag_the_variable_the_launcher_or_the_installer_layout() {
    let (dir, mut env) = scratch();
    let root = dir.path();
    assert_eq!(
        locate_python(None, &env).expect_err("none").to_string(),
        NO_PYTHON
    );
    let installer = root.join(".hermes/hermes-agent/venv/bin/python");
    executable(&installer, "");
    assert_eq!(locate_python(None, &env).expect("installer"), installer);

    let venv_python = root.join("venv/bin/python3.11");
    executable(&venv_python, "");
    executable(
        &root.join("bin/hermes"),
        &format!("#!{} -s\nimport hermes\n", venv_python.display()),
    );
    env.path = Some(root.join("bin").into_os_string());
    assert_eq!(locate_python(None, &env).expect("launcher"), venv_python);

    executable(&root.join("bin/python3"), "");
    executable(&root.join("bin/hermes"), "#!/usr/bin/env python3\n");
    assert_eq!(
        locate_python(None, &env).expect("env launcher"),
        root.join("bin/python3")
    );

    let other = root.join("other/python");
    executable(&other, "");
    env.hermes_python = Some(other.clone());
    assert_eq!(locate_python(None, &env).expect("variable"), other);
    assert_eq!(
        locate_python(Some(&installer), &env).expect("flag"),
        installer
    );
    let missing = root.join("nope/python");
    assert!(locate_python(Some(&missing), &env)
        .expect_err("not executable")
        .to_string()
        .starts_with(NO_PYTHON));
}

/// The real venv's Python; fails (never skips) when the venv is missing.
fn venv_python() -> PathBuf {
    let venv = std::env::var_os("HERMES_VENV").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/hermes-venv"),
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "the Hermes venv is missing ({}): run scripts/hermes-venv.sh first",
        python.display()
    );
    python
}

#[test]
fn env_helpers_read_and_write_through_hermes() {
    let dir = tempfile::tempdir().expect("scratch dir");
    let home = dir.path().join("hermes");
    fs::create_dir_all(&home).expect("home");
    fs::write(
        home.join(".env"),
        "# mine\nexport OTHER=1\nCANON_AGENT=old\n",
    )
    .expect("env");
    let helpers = Helpers::new(venv_python(), home.clone());
    let got = helpers
        .call(
            "env.get",
            json!({"keys": ["CANON_AGENT", "OTHER", "CANON_NOPE_UNSET"]}),
        )
        .expect("env.get");
    assert_eq!(
        got,
        json!({"values": {"CANON_AGENT": "old", "OTHER": "1", "CANON_NOPE_UNSET": null}})
    );
    helpers
        .call(
            "env.set",
            json!({"set": {"CANON_AGENT": "new one", "CANON_HOME_CHANNEL": "c1"}, "remove": ["OTHER"]}),
        )
        .expect("env.set");
    assert_eq!(
        fs::read_to_string(home.join(".env")).expect("env"),
        "# mine\nCANON_AGENT=\"new one\"\nCANON_HOME_CHANNEL=c1\n"
    );
}

#[test]
fn probe_answers_without_hermes_and_refuses_config_helpers() {
    let dir = tempfile::tempdir().expect("scratch dir");
    let venv = tempfile::tempdir().expect("venv dir");
    // A venv without Hermes: the probe still answers, config helpers refuse.
    let made = Command::new(venv_python())
        .args(["-m", "venv", "--without-pip"])
        .arg(venv.path())
        .status()
        .expect("python -m venv runs");
    assert!(made.success());
    let helpers = Helpers::new(venv.path().join("bin/python"), dir.path().to_path_buf());
    let probe = helpers.call("host.probe", json!({})).expect("probe");
    assert_eq!(probe["hermes_version"], Value::Null);
    assert!(probe["config_error"]
        .as_str()
        .is_some_and(|e| e.starts_with("Could not import Hermes config helpers: ")));
    let error = helpers
        .call("env.get", json!({"keys": []}))
        .expect_err("no Hermes");
    assert!(error
        .to_string()
        .starts_with("Could not import Hermes config helpers: "));
    assert_eq!(
        fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "nothing written"
    );
}

#[test]
fn launchers_are_classified_by_their_first_lines() {
    let (dir, mut env) = scratch();
    let bin = dir.path().join("bin");
    fs::create_dir_all(&bin).expect("bin");
    let python3 = bin.join("python3");
    fs::write(&python3, "").expect("python3");
    fs::set_permissions(&python3, fs::Permissions::from_mode(0o755)).expect("chmod");
    env.path = Some(bin.clone().into_os_string());
    let check = |head: &str| classify_launcher(head.as_bytes(), &env);
    assert_eq!(
        check("#!/opt/venv/bin/python\nimport sys\n"),
        Launcher::Python(PathBuf::from("/opt/venv/bin/python"))
    );
    assert_eq!(
        check("#!/usr/bin/env -S python3 -u\n"),
        Launcher::Python(python3.clone())
    );
    assert_eq!(
        check("#!/usr/bin/env python3.99\n"),
        Launcher::Python(PathBuf::from("python3.99")),
        "not on PATH: the name as written"
    );
    // pip's trampoline for a shebang longer than the kernel takes.
    assert_eq!(
        check("#!/bin/sh\n'''exec' \"/very/long/venv/bin/python\" \"$0\" \"$@\"\n' '''\n"),
        Launcher::Python(PathBuf::from("/very/long/venv/bin/python"))
    );
    assert_eq!(check("#!/bin/sh\nexec node cli.js\n"), Launcher::NonPython);
    assert_eq!(check("#!/usr/bin/env\n"), Launcher::NonPython);
    assert_eq!(check("\u{7f}ELF\u{2}\u{1}"), Launcher::Unknown);
    assert_eq!(check("#!\n"), Launcher::Unknown);
    assert_eq!(check(""), Launcher::Unknown);
    let missing = dir.path().join("no-such-launcher");
    assert_eq!(inspect_launcher(&missing, &env), Launcher::Unreadable);
}

#[test]
fn same_environment_means_one_bin_directory_and_one_interpreter() {
    let dir = tempfile::tempdir().expect("scratch");
    let make = |venv: &str| {
        let bin = dir.path().join(venv).join("bin");
        fs::create_dir_all(&bin).expect("bin");
        fs::write(bin.join("python3.11"), "").expect("python");
        std::os::unix::fs::symlink("python3.11", bin.join("python")).expect("link");
        std::os::unix::fs::symlink("python3.11", bin.join("python3")).expect("link");
        bin
    };
    let (a, b) = (make("a"), make("b"));
    assert!(same_environment(&a.join("python"), &a.join("python")));
    assert!(same_environment(&a.join("python"), &a.join("python3")));
    assert!(!same_environment(&a.join("python"), &b.join("python")));
    fs::write(a.join("python2"), "").expect("another interpreter");
    assert!(!same_environment(&a.join("python"), &a.join("python2")));
}
