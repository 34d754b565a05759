//! The `hub-liaison` skill tree (coms-bridge.md §8, §9.4): the copy packaged in this binary, the
//! fingerprint of a tree, and the atomic install with backup (coms-bridge.md §9.5).
//!
//! Fingerprint: SHA-256 over every regular file, visiting directory entries sorted by name, each
//! fed as its path relative to the tree root, a NUL byte, its bytes and a NUL byte. A symbolic
//! link anywhere, or anything that is neither a file nor a directory, is refused.

use std::io;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::control::ControlError;

/// The packaged skill's `SKILL.md`.
const SKILL_MD: &[u8] = include_bytes!("../../assets/hub-liaison/SKILL.md");

/// A skill tree: relative paths (`/`-separated) and file contents, in fingerprint order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillTree {
    files: Vec<(String, Vec<u8>)>,
}

impl SkillTree {
    /// The `hub-liaison` tree this program ships.
    pub fn packaged() -> Self {
        SkillTree::new(vec![("SKILL.md".into(), SKILL_MD.to_vec())])
    }

    /// A tree of these files.
    pub fn new(mut files: Vec<(String, Vec<u8>)>) -> Self {
        files.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
        SkillTree { files }
    }

    /// The files, in fingerprint order.
    pub fn files(&self) -> &[(String, Vec<u8>)] {
        &self.files
    }

    /// The tree's fingerprint, lower-case hex.
    pub fn fingerprint(&self) -> String {
        let mut hash = Sha256::new();
        for (path, bytes) in &self.files {
            feed(&mut hash, path, bytes);
        }
        format!("{:x}", hash.finalize())
    }

    /// Writes the tree into `dir`, which must not exist; directories are 0700.
    pub fn write_to(&self, dir: &Path) -> io::Result<()> {
        std::fs::DirBuilder::new().mode(0o700).create(dir)?;
        for (path, bytes) in &self.files {
            let target = dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)?;
            }
            std::fs::write(target, bytes)?;
        }
        Ok(())
    }
}

fn feed(hash: &mut Sha256, path: &str, bytes: &[u8]) {
    hash.update(path.as_bytes());
    hash.update([0]);
    hash.update(bytes);
    hash.update([0]);
}

/// The fingerprint of the tree at `root` (which must be a real directory).
pub fn fingerprint_dir(root: &Path) -> Result<String, ControlError> {
    fn visit(root: &Path, dir: &Path, hash: &mut Sha256) -> Result<(), ControlError> {
        let failed = |e: io::Error| {
            ControlError::Failed(format!(
                "cannot read Hermes skill tree {}: {e}",
                dir.display()
            ))
        };
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(failed)?
            .collect::<Result<_, _>>()
            .map_err(failed)?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let kind = std::fs::symlink_metadata(&path)
                .map_err(failed)?
                .file_type();
            if kind.is_symlink() {
                return Err(ControlError::Failed(format!(
                    "refusing symlink in Hermes skill tree: {}",
                    path.display()
                )));
            }
            if kind.is_dir() {
                visit(root, &path, hash)?;
            } else if kind.is_file() {
                let relative = path.strip_prefix(root).unwrap_or(&path);
                let relative: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                let bytes = std::fs::read(&path).map_err(failed)?;
                feed(hash, &relative.join("/"), &bytes);
            } else {
                return Err(ControlError::Failed(format!(
                    "unsupported entry in Hermes skill tree: {}",
                    path.display()
                )));
            }
        }
        Ok(())
    }
    let kind = std::fs::symlink_metadata(root)
        .map_err(|e| {
            ControlError::Failed(format!(
                "cannot read Hermes skill tree {}: {e}",
                root.display()
            ))
        })?
        .file_type();
    if kind.is_symlink() {
        return Err(ControlError::Failed(format!(
            "refusing symlink in Hermes skill tree: {}",
            root.display()
        )));
    }
    if !kind.is_dir() {
        return Err(ControlError::Failed(format!(
            "unsupported entry in Hermes skill tree: {}",
            root.display()
        )));
    }
    let mut hash = Sha256::new();
    visit(root, root, &mut hash)?;
    Ok(format!("{:x}", hash.finalize()))
}

/// Makes sure `dir` is a real directory: creates it (0700) when missing; refuses a symbolic
/// link or a non-directory.
pub fn ensure_real_dir(dir: &Path) -> Result<(), ControlError> {
    let unsafe_dir = || {
        ControlError::Failed(format!(
            "refusing unsafe Hermes directory: {}",
            dir.display()
        ))
    };
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_dir() => Ok(()),
        Ok(_) => Err(unsafe_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| ControlError::Failed(format!("cannot create {}: {e}", dir.display()))),
        Err(_) => Err(unsafe_dir()),
    }
}

/// Installs `tree` as `<profile>/skills/hub-liaison` atomically: a temp copy beside it, the old
/// tree moved to `<profile>/backups/agent-fleet/hub-liaison-<stamp>`, then a rename. On failure
/// the temp copy is removed and a moved-away tree is put back. Returns the backup directory.
pub fn install_tree(
    profile_dir: &Path,
    tree: &SkillTree,
    stamp: &str,
    nonce: &str,
) -> Result<Option<PathBuf>, ControlError> {
    let skills = profile_dir.join("skills");
    ensure_real_dir(&skills)?;
    let installed = skills.join("hub-liaison");
    let temp = skills.join(format!(".hub-liaison.tmp-{}-{nonce}", std::process::id()));
    let mut backup = None;
    let attempt = (|| -> Result<(), ControlError> {
        let io_error = |what: &str, e: io::Error| ControlError::Failed(format!("{what}: {e}"));
        tree.write_to(&temp)
            .map_err(|e| io_error(&format!("cannot copy hub-liaison to {}", temp.display()), e))?;
        if fingerprint_dir(&temp)? != tree.fingerprint() {
            return Err(ControlError::Failed(
                "hub-liaison copy differs from the packaged tree".into(),
            ));
        }
        if std::fs::symlink_metadata(&installed).is_ok() {
            let backups = profile_dir.join("backups");
            ensure_real_dir(&backups)?;
            let ours = backups.join("agent-fleet");
            ensure_real_dir(&ours)?;
            let target = ours.join(format!("hub-liaison-{stamp}"));
            std::fs::rename(&installed, &target)
                .map_err(|e| io_error(&format!("cannot back up {}", installed.display()), e))?;
            backup = Some(target);
        }
        std::fs::rename(&temp, &installed)
            .map_err(|e| io_error(&format!("cannot install {}", installed.display()), e))
    })();
    if let Err(error) = attempt {
        let _ = std::fs::remove_dir_all(&temp);
        if let Some(backup) = &backup {
            if std::fs::symlink_metadata(&installed).is_err() {
                let _ = std::fs::rename(backup, &installed);
            }
        }
        return Err(error);
    }
    Ok(backup)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packaged_tree_fingerprints_like_its_copy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = SkillTree::new(vec![
            ("a.txt".into(), b"1".to_vec()),
            ("a/b".into(), b"2".to_vec()),
            ("SKILL.md".into(), b"3".to_vec()),
        ]);
        let target = dir.path().join("t");
        tree.write_to(&target).expect("write");
        assert_eq!(
            fingerprint_dir(&target).expect("fingerprint"),
            tree.fingerprint()
        );
        let packaged = SkillTree::packaged();
        packaged.write_to(&dir.path().join("p")).expect("write");
        assert_eq!(
            fingerprint_dir(&dir.path().join("p")).expect("fingerprint"),
            packaged.fingerprint()
        );
        assert_ne!(packaged.fingerprint(), tree.fingerprint());
        let text = String::from_utf8(packaged.files()[0].1.clone()).expect("utf-8");
        assert!(text.starts_with("---\nname: hub-liaison\n"));
    }

    #[test]
    fn symlinks_and_odd_entries_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = dir.path().join("t");
        std::fs::create_dir(&tree).expect("mkdir");
        std::fs::write(tree.join("SKILL.md"), "x").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", tree.join("link")).expect("symlink");
        let error = fingerprint_dir(&tree).expect_err("symlink").to_string();
        assert!(
            error.starts_with("refusing symlink in Hermes skill tree: "),
            "{error}"
        );
        std::fs::remove_file(tree.join("link")).expect("rm");
        std::os::unix::net::UnixListener::bind(tree.join("sock")).expect("socket");
        let error = fingerprint_dir(&tree).expect_err("socket").to_string();
        assert!(
            error.starts_with("unsupported entry in Hermes skill tree: "),
            "{error}"
        );
    }
}
