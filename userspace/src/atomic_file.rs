//! Files replaced whole: written to a temporary file beside the target, flushed to disk, renamed
//! over it, and the directory flushed too, so that after a crash or power loss the file is the
//! old version or the new one, never a mix or nothing.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use anyhow::Context;

/// Replaces `path` with what `write` writes.
pub fn replace(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let temporary = temporary_path(path);
    let file = File::create(&temporary)
        .with_context(|| format!("cannot create {}", temporary.display()))?;
    let mut out = BufWriter::new(file);
    let written = write(&mut out)
        .and_then(|()| out.flush())
        .and_then(|()| out.get_ref().sync_all());
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(err).with_context(|| format!("cannot write {}", temporary.display()));
    }
    std::fs::rename(&temporary, path).with_context(|| {
        format!(
            "cannot rename {} to {}",
            temporary.display(),
            path.display()
        )
    })?;
    // The rename is durable once the directory is.
    let directory = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(directory)
        .and_then(|dir| dir.sync_all())
        .with_context(|| format!("cannot flush {}", directory.display()))
}

/// `<path>.tmp`, in the same directory (a rename does not cross file systems).
fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = std::env::temp_dir().join(format!("hpd-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        replace(&path, |w| w.write_all(b"one")).unwrap();
        replace(&path, |w| w.write_all(b"two")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let failed = replace(&path, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"two",
            "the old version stays"
        );
        assert!(!temporary_path(&path).exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
