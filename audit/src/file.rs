//! File plumbing shared by the writer, the verifier and `tail`: opening with the right mode, the
//! sidecar lock, positional reads, and reading lines backwards from the end.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Longest line the crate writes or reads back. Records are a few hundred bytes; the cap keeps a
/// hostile last line from making every append (which reads that line) allocate without bound.
pub(crate) const MAX_LINE_BYTES: u64 = 1 << 20;

/// The sidecar lock file, `audit.jsonl.lock` beside `audit.jsonl`.
///
/// A sidecar rather than the log itself because on Windows a lock on the log would be mandatory
/// and make readers (`verify`, `tail`) fail instead of wait. It is never deleted: processes that
/// locked different inodes would not exclude each other.
pub(crate) fn lock_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

fn private(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

/// The log, for appending (every write lands at the end, whatever the read position) and reading
/// its tail. Created with mode 0600 if missing.
pub(crate) fn open_log_for_append(path: &Path) -> io::Result<File> {
    private(OpenOptions::new().read(true).append(true).create(true)).open(path)
}

/// The sidecar lock for writers, created with mode 0600 if missing.
pub(crate) fn open_lock_for_write(log: &Path) -> io::Result<File> {
    private(OpenOptions::new().read(true).write(true).create(true)).open(lock_path(log))
}

/// The length of `file` at a moment when no cooperating writer is half-way through a line.
///
/// Readers take the shared lock only for this instant, then read up to the returned length
/// without it: the log is append-only, so those bytes no longer change, and a long `verify`
/// never stalls the gateway's appends. If the sidecar does not exist (no writer ever ran) or
/// cannot be opened (a read-only copy), the length is taken unlocked.
pub(crate) fn stable_len(log: &Path, file: &File) -> io::Result<u64> {
    match File::open(lock_path(log)) {
        Ok(lock_file) => {
            let lock = fd_lock::RwLock::new(lock_file);
            let _shared = lock.read()?;
            Ok(file.metadata()?.len())
        }
        Err(_) => Ok(file.metadata()?.len()),
    }
}

/// Reads exactly `buf.len()` bytes at `offset` without moving any shared cursor.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(buf)
    }
}

/// The byte at `offset`.
pub(crate) fn byte_at(file: &File, offset: u64) -> io::Result<u8> {
    let mut b = [0u8; 1];
    read_exact_at(file, &mut b, offset)?;
    Ok(b[0])
}

/// One line, without its `\n`, and the byte offset where it starts.
#[derive(Debug)]
pub(crate) struct Line {
    pub(crate) offset: u64,
    pub(crate) bytes: Vec<u8>,
}

/// The line whose content ends at `end` (exclusive): the bytes after the last `\n` before `end`.
/// Reads backwards in growing chunks, so the cost depends on the line, not the file.
pub(crate) fn line_ending_at(file: &File, end: u64) -> io::Result<Line> {
    let mut bytes: Vec<u8> = Vec::new(); // always the bytes [pos, end)
    let mut pos = end;
    let mut chunk: u64 = 1024;
    while pos > 0 {
        if bytes.len() as u64 > MAX_LINE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("audit log line ending at byte {end} is longer than {MAX_LINE_BYTES} bytes"),
            ));
        }
        let start = pos.saturating_sub(chunk);
        let mut buf = vec![0u8; usize::try_from(pos - start).unwrap_or(usize::MAX)];
        read_exact_at(file, &mut buf, start)?;
        let newline = buf.iter().rposition(|&b| b == b'\n');
        if let Some(i) = newline {
            buf.drain(..=i);
        }
        buf.extend_from_slice(&bytes);
        bytes = buf;
        if let Some(i) = newline {
            return Ok(Line {
                offset: start + i as u64 + 1,
                bytes,
            });
        }
        pos = start;
        chunk = (chunk * 2).min(MAX_LINE_BYTES);
    }
    Ok(Line { offset: 0, bytes })
}

/// Up to `n` complete lines before `end`, oldest first. `end` must be 0 or just past a `\n`.
pub(crate) fn last_lines(file: &File, end: u64, n: usize) -> io::Result<Vec<Line>> {
    let mut lines = Vec::new();
    let mut end = end;
    while lines.len() < n && end > 0 {
        // `end - 1` is the `\n` that terminates the line.
        let line = line_ending_at(file, end - 1)?;
        end = line.offset;
        lines.push(line);
    }
    lines.reverse();
    Ok(lines)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::Write;

    fn file_with(content: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        File::create(&path).unwrap().write_all(content).unwrap();
        let f = File::open(&path).unwrap();
        (dir, f)
    }

    fn texts(lines: &[Line]) -> Vec<(u64, String)> {
        lines
            .iter()
            .map(|l| (l.offset, String::from_utf8(l.bytes.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn last_lines_reads_backwards_across_chunk_boundaries() {
        let long = "x".repeat(5000);
        let content = format!("a\n{long}\n\nbc\n");
        let (_dir, f) = file_with(content.as_bytes());
        let len = content.len() as u64;
        assert_eq!(texts(&last_lines(&f, len, 1).unwrap()), [(5004, "bc".into())]);
        assert_eq!(
            texts(&last_lines(&f, len, 10).unwrap()),
            [
                (0, "a".into()),
                (2, long.clone()),
                (5003, String::new()),
                (5004, "bc".into())
            ]
        );
        assert!(last_lines(&f, len, 0).unwrap().is_empty());
        assert!(last_lines(&f, 0, 3).unwrap().is_empty());
    }

    #[test]
    fn line_ending_at_finds_an_unterminated_fragment() {
        let (_dir, f) = file_with(b"one\ntwo\nfrag");
        let frag = line_ending_at(&f, 12).unwrap();
        assert_eq!((frag.offset, frag.bytes.as_slice()), (8, &b"frag"[..]));
        let (_dir, f) = file_with(b"frag");
        assert_eq!(line_ending_at(&f, 4).unwrap().offset, 0);
    }

    #[test]
    fn lock_path_is_a_sidecar() {
        assert_eq!(
            lock_path(Path::new("/h/audit.jsonl")),
            PathBuf::from("/h/audit.jsonl.lock")
        );
    }
}
