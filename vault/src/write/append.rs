//! Append-only files read as streams (docs/contract.md#proposals): `_applied.jsonl` grows by one line per apply and
//! is never rewritten, so its cost follows the change, not the file's size, and it has no size
//! limit. Paths are contained exactly like every other write (area check, no-follow walk).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use cap_std::fs::OpenOptions;
use policy::{PathError, VaultPath};

use super::{Area, Syncs, VaultFs, WriteError, sync_dir};

/// `read_last_line` looks back at most this far for the last line; a longer one is `TooLarge`.
pub const MAX_LAST_LINE_BYTES: u64 = 1 << 20;
/// The first chunk `read_last_line` reads from the end; it doubles up to the cap.
const TAIL_CHUNK: u64 = 8 * 1024;

impl VaultFs {
    /// Appends `line` and a `\n` to the regular file at `path` (created if missing, with missing
    /// folders inside `area`) in one write on an `O_APPEND` handle, then fsyncs it (and its folder
    /// when created). If the file ends in a torn line (no final `\n`, a crash mid-append), a `\n`
    /// goes first, so the new line starts on its own line. `NotALine` if `line` holds a `\n`.
    pub fn append_line(&self, area: Area, path: &VaultPath, line: &[u8]) -> Result<(), WriteError> {
        self.append_line_unsynced(area, path, line)?.sync()
    }

    /// [`VaultFs::append_line`] without the fsyncs: the file (and its folder, when created) are
    /// returned for the caller to sync, so a group of appends shares one.
    pub fn append_line_unsynced(
        &self,
        area: Area,
        path: &VaultPath,
        line: &[u8],
    ) -> Result<Syncs, WriteError> {
        area.check(self.layout(), path)?;
        if line.contains(&b'\n') {
            return Err(WriteError::NotALine);
        }
        let parent = self.open_parent(area, path, true)?;
        let dir = parent.dir.as_ref().unwrap_or(self.root_dir());
        let name = path.file_name();
        let existed = self.check_destination(dir, &parent.segments, name)?.is_some();
        let mut options = OpenOptions::new();
        // SECURITY(T-PATH): no-follow, so a symlink swapped in since the check fails to open;
        // non-blocking, so a FIFO swapped in cannot hang the apply.
        options
            .read(true)
            .append(true)
            .create(true)
            .follow(FollowSymlinks::No)
            .nonblock(true);
        let mut file = dir.open_with(name, &options)?.into_std();
        // SECURITY(T-PATH): the type of the handle we write.
        let len = regular_len(&file)?;
        let mut out = Vec::with_capacity(line.len() + 2);
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                out.push(b'\n');
            }
        }
        out.extend_from_slice(line);
        out.push(b'\n');
        // One write on an O_APPEND handle: the bytes land at the end whatever the read position.
        file.write_all(&out)?;
        let mut pending = Syncs::default();
        pending.add(file)?;
        if !existed {
            let (synced, dirs) = self.collecting_dir_syncs(|| sync_dir(dir));
            synced?;
            pending.merge(dirs);
        }
        Ok(pending)
    }

    /// The last line of the file at `path` with trailing whitespace (a final `\n`, or a torn
    /// fragment that is only whitespace) dropped; `None` if the file is missing or holds only
    /// whitespace. Reads backwards from the end in growing chunks: the cost follows the line, not
    /// the file. `TooLarge` when that line is over `MAX_LAST_LINE_BYTES`; `NotText` if not UTF-8.
    pub fn read_last_line(&self, area: Area, path: &VaultPath) -> Result<Option<String>, WriteError> {
        let Some(mut file) = self.open_existing(area, path)? else {
            return Ok(None);
        };
        let len = regular_len(&file)?;
        match last_line(&mut file, len)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| WriteError::NotText),
        }
    }

    /// The regular file at `path` opened for reading as a stream, with no size limit (for
    /// append-only logs read line by line); `None` if it is missing.
    pub fn open_read_stream(
        &self,
        area: Area,
        path: &VaultPath,
    ) -> Result<Option<BufReader<File>>, WriteError> {
        let Some(file) = self.open_existing(area, path)? else {
            return Ok(None);
        };
        regular_len(&file)?;
        Ok(Some(BufReader::with_capacity(64 * 1024, file)))
    }
}

/// The length of an opened handle, refusing anything but a regular file.
fn regular_len(file: &File) -> Result<u64, WriteError> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(PathError::Denied("not a regular file").into());
    }
    Ok(meta.len())
}

/// The last line of the first `len` bytes of `file`, trailing ASCII whitespace dropped; `None`
/// if there is nothing but whitespace. Looks back at most `MAX_LAST_LINE_BYTES`.
fn last_line(file: &mut (impl Read + Seek), len: u64) -> Result<Option<Vec<u8>>, WriteError> {
    // The line, the `\n` before it and one trailing `\n`.
    let floor = len.saturating_sub(MAX_LAST_LINE_BYTES + 2);
    let mut tail: Vec<u8> = Vec::new(); // always the bytes [pos, len)
    let mut pos = len;
    let mut chunk = TAIL_CHUNK;
    while pos > floor {
        let start = pos.saturating_sub(chunk).max(floor);
        let mut buf = vec![0u8; usize::try_from(pos - start).map_err(|_| WriteError::TooLarge)?];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf)?;
        buf.extend_from_slice(&tail);
        tail = buf;
        pos = start;
        let Some(end) = tail.iter().rposition(|b| !b.is_ascii_whitespace()) else {
            chunk = chunk.saturating_mul(2);
            continue;
        };
        let line_start = match tail[..end].iter().rposition(|&b| b == b'\n') {
            Some(nl) => nl + 1,
            None if pos == 0 => 0,
            None => {
                chunk = chunk.saturating_mul(2);
                continue;
            }
        };
        if (end + 1 - line_start) as u64 > MAX_LAST_LINE_BYTES {
            return Err(WriteError::TooLarge);
        }
        return Ok(Some(tail[line_start..=end].to_vec()));
    }
    // Nothing but whitespace in the window: the whole file, or more before it than allowed.
    if pos > 0 {
        Err(WriteError::TooLarge)
    } else {
        Ok(None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn last(bytes: &[u8]) -> Option<String> {
        last_line(&mut Cursor::new(bytes), bytes.len() as u64)
            .unwrap()
            .map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn last_line_skips_trailing_whitespace_only() {
        assert_eq!(last(b""), None);
        assert_eq!(last(b"\n \n\t"), None);
        assert_eq!(last(b"one"), Some("one".into()));
        assert_eq!(last(b"one\ntwo\n"), Some("two".into()));
        assert_eq!(last(b"one\ntwo\n  \n"), Some("two".into()));
        // A torn fragment with content is the last line: the caller sees it is not a record.
        assert_eq!(last(b"one\ntw"), Some("tw".into()));
    }

    #[test]
    fn last_line_grows_across_chunks_and_stops_at_the_cap() {
        let long = "x".repeat(3 * TAIL_CHUNK as usize + 5);
        let text = format!("a\n{long}\n");
        assert_eq!(last(text.as_bytes()), Some(long));
        let huge = vec![b'y'; MAX_LAST_LINE_BYTES as usize + TAIL_CHUNK as usize];
        let mut bytes = b"a\n".to_vec();
        bytes.extend_from_slice(&huge);
        assert!(matches!(
            last_line(&mut Cursor::new(&bytes), bytes.len() as u64),
            Err(WriteError::TooLarge)
        ));
    }
}
