//! Where the bridge's private files live (coms-bridge.md §3). `BRIDGE_DIR` is always
//! `$HOME/.pi/coms/hermes-bridge`, derived from `HOME` and never from `PI_COMS_DIR` (the Hermes
//! liaison writes to that fixed path); `--questions-dir D` moves the questions to `D` and the
//! log to `parent(D)/log.ndjson`.

use std::path::{Path, PathBuf};

use crate::core::answer::ANSWER_SUFFIX;

/// `$HOME/.pi/coms/hermes-bridge`.
pub fn bridge_dir(home: &Path) -> PathBuf {
    home.join(".pi").join("coms").join("hermes-bridge")
}

/// `$HOME/.pi/coms/hermes-bridge/questions`.
pub fn questions_dir(home: &Path) -> PathBuf {
    bridge_dir(home).join("questions")
}

/// The log beside a questions directory: `parent(dir)/log.ndjson`.
pub fn log_path(questions_dir: &Path) -> PathBuf {
    questions_dir
        .parent()
        .unwrap_or(questions_dir)
        .join("log.ndjson")
}

/// `<dir>/<qid>.answer.json`.
pub fn answer_path(questions_dir: &Path, qid: &str) -> PathBuf {
    questions_dir.join(format!("{qid}{ANSWER_SUFFIX}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_paths() {
        let home = Path::new("/home/u");
        assert_eq!(
            questions_dir(home),
            Path::new("/home/u/.pi/coms/hermes-bridge/questions")
        );
        assert_eq!(
            log_path(&questions_dir(home)),
            Path::new("/home/u/.pi/coms/hermes-bridge/log.ndjson")
        );
        assert_eq!(
            answer_path(&questions_dir(home), "01ARZ3NDEKTSV4RRFFQ69G5FAV"),
            Path::new(
                "/home/u/.pi/coms/hermes-bridge/questions/01ARZ3NDEKTSV4RRFFQ69G5FAV.answer.json"
            )
        );
        assert_eq!(log_path(Path::new("/tmp/q")), Path::new("/tmp/log.ndjson"));
    }
}
