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

#[test]
fn python_comes_from_the_venv_this_binary_sits_in() {
    let (dir, mut env) = scratch();
    let root = dir.path();
    let venv = root.join("venv");
    let python = venv.join("bin/python");
    executable(&python, "");
    executable(&root.join("bin/python3"), "");
    executable(&root.join("bin/hermes"), "#!/usr/bin/env python3\n");
    env.path = Some(root.join("bin").into_os_string());
    env.exe_dir = Some(venv.join("bin"));
    // A bin/ with a python but no pyvenv.cfg above it is no venv: the launcher decides.
    assert_eq!(
        locate_python(None, &env).expect("launcher"),
        root.join("bin/python3")
    );
    fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").expect("pyvenv.cfg");
    assert_eq!(locate_python(None, &env).expect("the venv's"), python);
    // --python and $HERMES_PYTHON still come first.
    let other = root.join("other/python");
    executable(&other, "");
    env.hermes_python = Some(other.clone());
    assert_eq!(locate_python(None, &env).expect("variable"), other);
    env.hermes_python = None;
    assert_eq!(
        locate_python(Some(&root.join("bin/python3")), &env).expect("flag"),
        root.join("bin/python3")
    );
    // A venv without a python beside the binary: skipped.
    fs::remove_file(&python).expect("remove");
    assert_eq!(
        locate_python(None, &env).expect("launcher"),
        root.join("bin/python3")
    );
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

/// A `config.write` request for `change` on the text in `home`, made by the editor.
fn config_write(helpers: &Helpers, home: &Path, change: &str) -> Value {
    let text = fs::read_to_string(home.join("config.yaml")).expect("config");
    let edit = match change {
        "install" => config_edit::install(&text, "canon-hermes", "canon"),
        _ => config_edit::uninstall(&text, "canon-hermes", "canon"),
    }
    .expect("the editor reads it");
    helpers
        .call(
            "config.write",
            json!({"change": change, "plugin_key": "canon-hermes", "platform_key": "canon",
                   "old_text": text, "new_text": edit.text}),
        )
        .expect("config.write")
}

#[test]
fn config_write_writes_the_editor_s_text_once_checked_and_keeps_the_original_once() {
    let dir = tempfile::tempdir().expect("scratch dir");
    let home = dir.path().join("hermes");
    fs::create_dir_all(&home).expect("home");
    let original = "# mine\nmodel:\n    default: x   # pinned\n\nplugins:\n    enabled: [b, a]\n";
    let config = home.join("config.yaml");
    fs::write(&config, original).expect("config");
    fs::set_permissions(&config, fs::Permissions::from_mode(0o640)).expect("chmod");
    let helpers = Helpers::new(venv_python(), home.clone());

    let answer = config_write(&helpers, &home, "install");
    let backup = home.join("config.yaml.before-canon-hermes");
    assert_eq!(
        answer,
        json!({"plugin_changed": true, "platform_changed": true, "saved": true, "method": "text",
               "backup": backup.to_str(), "backup_created": true})
    );
    let installed = "# mine\nmodel:\n    default: x   # pinned\n\nplugins:\n    enabled: [b, a, \
                     canon-hermes]\nplatforms:\n    canon:\n        enabled: true\n";
    assert_eq!(fs::read_to_string(&config).expect("config"), installed);
    let mode = |path: &Path| fs::metadata(path).expect("mode").permissions().mode() & 0o777;
    assert_eq!(mode(&config), 0o640, "the config keeps its mode");
    assert_eq!(fs::read_to_string(&backup).expect("backup"), original);
    assert_eq!(mode(&backup), 0o600);

    // Nothing to do: nothing written.
    let answer = config_write(&helpers, &home, "install");
    assert_eq!(answer["saved"], false);
    assert_eq!(answer["plugin_changed"], false);

    // Uninstall gives the bytes back; the first backup stays as it was.
    let answer = config_write(&helpers, &home, "uninstall");
    assert_eq!(answer["backup_created"], false);
    assert_eq!(fs::read_to_string(&config).expect("config"), original);
    assert_eq!(fs::read_to_string(&backup).expect("backup"), original);

    // A text that is not the intended change is never written: the round trip is.
    let wrong =
        "plugins:\n    enabled: [canon-hermes]\nplatforms:\n    canon:\n        enabled: true\n";
    let answer = helpers
        .call(
            "config.write",
            json!({"change": "install", "plugin_key": "canon-hermes", "platform_key": "canon",
                   "old_text": original, "new_text": wrong}),
        )
        .expect("config.write");
    assert_eq!(answer["method"], "ruamel");
    let written = fs::read_to_string(&config).expect("config");
    assert!(
        written.contains("# pinned") && written.contains("model:"),
        "{written}"
    );

    // A file changed since the editor read it is refused.
    let error = helpers
        .call(
            "config.write",
            json!({"change": "uninstall", "plugin_key": "canon-hermes", "platform_key": "canon",
                   "old_text": original, "new_text": original}),
        )
        .expect_err("changed meanwhile");
    assert!(
        error
            .to_string()
            .ends_with("changed while canon-hermes was editing it; run the command again"),
        "{error}"
    );
}

#[test]
fn generated_configs_parse_to_exactly_the_intended_change() {
    // The editor's texts for the generated configs, parsed with Hermes' own loader and compared
    // with the helper's rules applied to the parsed original.
    let samples = config_edit::tests::sample_configs(0x0def_aced, 400);
    let cases: Vec<Value> = samples
        .iter()
        .map(|sample| {
            let installed = config_edit::install(&sample.text, "canon-hermes", "canon")
                .expect("install")
                .text;
            let uninstalled = config_edit::uninstall(&installed, "canon-hermes", "canon")
                .expect("uninstall")
                .text;
            json!({"old": sample.text, "installed": installed, "uninstalled": uninstalled})
        })
        .collect();
    let program = "import copy, json, sys\n\
        request = json.load(sys.stdin)\n\
        ns = {'__name__': 'helper'}\n\
        exec(request['helper'], ns)\n\
        load = lambda text: ns['as_mapping'](ns['yaml_load'](text), 'config.yaml')\n\
        bad = []\n\
        for case in request['cases']:\n\
        \x20   want = copy.deepcopy(load(case['old']))\n\
        \x20   ns['apply_install'](want, 'canon-hermes', 'canon')\n\
        \x20   if not ns['same'](load(case['installed']), want):\n\
        \x20       bad.append(['install', case['old']])\n\
        \x20   ns['apply_uninstall'](want, 'canon-hermes', 'canon')\n\
        \x20   if not ns['same'](load(case['uninstalled']), want):\n\
        \x20       bad.append(['uninstall', case['old']])\n\
        print(json.dumps({'checked': len(request['cases']), 'bad': bad}))\n";
    let dir = tempfile::tempdir().expect("scratch dir");
    let mut child = Command::new(venv_python())
        .args(["-I", "-c", program])
        .env("HERMES_HOME", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    let request = json!({"helper": HELPER_PROGRAM, "cases": cases}).to_string();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.as_bytes())
        .expect("request");
    let out = child.wait_with_output().expect("python ends");
    assert!(out.status.success());
    let answer: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(answer, json!({"checked": 400, "bad": []}));
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
