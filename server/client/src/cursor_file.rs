//! Cursors as text, and a file that keeps one across restarts.
//!
//! Text: URL-safe base64 without padding, as `ringfeed tail` prints it (no
//! JSON escaping needed). Standard base64 (`+`, `/`, padding), as JSON
//! encoders print bytes, reads the same.
//!
//! [`CursorFile`]: a follower restarted with the same file resumes right
//! after the last event it saved, the way a Kafka consumer commits its
//! offset. The file is replaced whole (write a temporary file, fsync it,
//! rename it over the old one, fsync the directory), so a crash or a power
//! loss leaves the old cursor or the new one, never a torn one.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;

/// Cursor text: URL-safe base64, printed without padding; padding is
/// accepted on input.
pub const CURSOR_TEXT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Standard base64 with or without padding: how JSON outputs print bytes.
const STANDARD_TEXT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A cursor's text as `ringfeed tail` prints it.
pub fn cursor_text(cursor: &[u8]) -> String {
    let mut text = Vec::new();
    push_cursor_text(&mut text, cursor);
    String::from_utf8(text).expect("base64 is ASCII")
}

/// [`cursor_text`], appended to `out` (as `tail` writes a line): the one
/// place cursor text is encoded; [`CURSOR_TEXT`] reads it back.
pub fn push_cursor_text(out: &mut Vec<u8>, cursor: &[u8]) {
    crate::json::push_base64(out, cursor, &base64_simd::URL_SAFE_NO_PAD);
}

/// A cursor's bytes from its text: URL-safe base64 (as `tail` prints it) or
/// standard base64 (as `subscribers --json` and other JSON outputs print
/// bytes), padded or not. `None` if it is neither, or empty. The bytes are
/// checked when the cursor is used.
pub fn parse_cursor_text(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    CURSOR_TEXT
        .decode(text)
        .or_else(|_| STANDARD_TEXT.decode(text))
        .ok()
        .filter(|bytes| !bytes.is_empty())
}

/// A file holding one cursor (its text and a newline), replaced atomically.
#[derive(Clone, Debug)]
pub struct CursorFile {
    path: PathBuf,
}

impl CursorFile {
    pub fn new(path: impl Into<PathBuf>) -> CursorFile {
        CursorFile { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved cursor's bytes; `None` if the file does not exist (a first
    /// start). A file that exists but holds no cursor is an error: resuming
    /// from the wrong place silently is what the file is there to prevent.
    pub fn load(&self) -> io::Result<Option<Vec<u8>>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        parse_cursor_text(&text).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds no cursor (it should hold one line of base64, as tail prints \
                     cursors); remove it to start afresh",
                    self.path.display()
                ),
            )
        })
    }

    /// Replaces the file with `cursor`: written to `PATH.tmp`, fsynced,
    /// renamed over `PATH`, and the directory fsynced, so after a crash the
    /// file holds this cursor or the one before, whole.
    pub fn save(&self, cursor: &[u8]) -> io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut file = std::fs::File::create(&tmp)?;
        let mut text = cursor_text(cursor);
        text.push('\n');
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, &self.path)?;
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_text_is_what_cursor_text_reads_back() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let mut out = b"x".to_vec();
            push_cursor_text(&mut out, &bytes);
            assert_eq!(
                &out[1..],
                CURSOR_TEXT.encode(&bytes).as_bytes(),
                "{len} bytes"
            );
            assert_eq!(cursor_text(&bytes).as_bytes(), &out[1..], "{len} bytes");
        }
    }

    #[test]
    fn cursor_text_reads_both_base64_alphabets() {
        let bytes = vec![0xfb, 0xff, 0x00, 0x3e, 0x3f];
        let url = cursor_text(&bytes);
        assert!(!url.contains(['+', '/', '=']));
        assert_eq!(parse_cursor_text(&url), Some(bytes.clone()));
        let standard = base64::engine::general_purpose::STANDARD.encode(&bytes);
        assert!(standard.contains(['+', '/']));
        assert_eq!(parse_cursor_text(&standard), Some(bytes.clone()));
        assert_eq!(parse_cursor_text(&format!(" {url}\n")), Some(bytes));
        assert_eq!(parse_cursor_text(""), None);
        assert_eq!(parse_cursor_text("not base64!"), None);
    }

    #[test]
    fn a_cursor_file_is_absent_saved_replaced_or_refused() {
        let dir = std::env::temp_dir().join(format!("cursor-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = CursorFile::new(dir.join("c"));
        assert_eq!(file.load().unwrap(), None);
        file.save(&[1, 2, 3]).unwrap();
        assert_eq!(file.load().unwrap(), Some(vec![1, 2, 3]));
        file.save(&[4]).unwrap();
        assert_eq!(file.load().unwrap(), Some(vec![4]));
        assert!(!dir.join("c.tmp").exists());
        std::fs::write(dir.join("c"), "").unwrap();
        let refused = file.load().unwrap_err();
        assert!(refused.to_string().contains("holds no cursor"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
