//! Tells when the record file holds something other than what was loaded last.
//!
//! The modification time and length are checked on every poll, which costs one `stat`. They can
//! miss an edit: file systems keep the time in coarse ticks, so an edit of the same length made
//! in the tick of the last load leaves both alike. As git does with its index, a version whose
//! time is too close to when it was loaded is "racy", and its content is compared until the
//! clock has moved past it.

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

/// How close to its loading a modification time must be for an unseen edit to hide behind it.
/// Wide enough for the coarsest time stamps (FAT's 2 s).
const RACY_WINDOW: Duration = Duration::from_secs(2);

/// The version of a file last loaded.
pub struct FileWatch {
    path: PathBuf,
    /// Modification time and length, taken before the content was read.
    stamp: Option<(SystemTime, u64)>,
    /// When the stamp was taken.
    taken: SystemTime,
    /// Hash of the content loaded.
    content: u64,
}

impl FileWatch {
    /// Reads the file for a first load: the watch and the text.
    pub fn open(path: &Path) -> std::io::Result<(Self, String)> {
        // Stamp first: an edit made while reading is then seen as a change on the next check.
        let taken = SystemTime::now();
        let stamp = stamp(path);
        let text = std::fs::read_to_string(path)?;
        let watch = Self {
            path: path.to_owned(),
            stamp,
            taken,
            content: hash(&text),
        };
        Ok((watch, text))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's new text if it changed since the last load (or, when `forced`, whatever it
    /// holds). A file that cannot be read is an error once, until it changes again.
    pub fn check(&mut self, forced: bool) -> std::io::Result<Option<String>> {
        let taken = SystemTime::now();
        let stamp = stamp(&self.path);
        if !forced && stamp == self.stamp && !self.is_racy() {
            return Ok(None);
        }
        self.stamp = stamp;
        self.taken = taken;
        let text = std::fs::read_to_string(&self.path)?;
        let content = hash(&text);
        let changed = forced || content != self.content;
        self.content = content;
        Ok(changed.then_some(text))
    }

    /// Whether an edit could have left the stamp as it is (a missing file has none to hide).
    fn is_racy(&self) -> bool {
        self.stamp
            .is_some_and(|(modified, _)| modified + RACY_WINDOW >= self.taken)
    }
}

/// What identifies a version of the file cheaply: modification time and length.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn hash(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(tag: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "hpd-watch-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn an_edit_of_the_same_length_in_the_same_tick_is_seen() {
        let path = temp_file("tick", "web: 198.18.0.1\n");
        let (mut watch, _) = FileWatch::open(&path).unwrap();
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, "web: 198.18.0.2\n").unwrap();
        // The same stamp, as a coarse clock would leave it.
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        assert_eq!(
            watch.check(false).unwrap().as_deref(),
            Some("web: 198.18.0.2\n")
        );
        assert_eq!(watch.check(false).unwrap(), None, "seen once");
        std::fs::remove_file(&path).unwrap();
        assert!(watch.check(false).is_err(), "gone");
        assert_eq!(watch.check(false).unwrap(), None, "said once");
    }

    #[test]
    fn an_old_unchanged_file_is_not_read_again_and_a_touch_is_no_change() {
        let path = temp_file("old", "web: 198.18.0.1\n");
        let old = SystemTime::now() - Duration::from_secs(60);
        let set_time = |time| {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(time)
                .unwrap()
        };
        set_time(old);
        let (mut watch, _) = FileWatch::open(&path).unwrap();
        assert!(!watch.is_racy());
        // Other content behind the same stamp: reading the file would see it, so None shows
        // that the old, unchanged stamp kept the file from being read.
        std::fs::write(&path, "web: 198.18.0.9\n").unwrap();
        set_time(old);
        assert_eq!(watch.check(false).unwrap(), None, "not read");
        std::fs::write(&path, "web: 198.18.0.1\n").unwrap();
        set_time(old);
        set_time(SystemTime::now());
        assert_eq!(watch.check(false).unwrap(), None, "same content");
        assert_eq!(
            watch.check(true).unwrap().as_deref(),
            Some("web: 198.18.0.1\n"),
            "forced"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
