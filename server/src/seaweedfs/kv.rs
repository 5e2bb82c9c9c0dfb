//! The filer API's `KvGet`/`KvPut`: a small durable map in the data dir,
//! where SeaweedFS's `filer.backup` and `filer.sync` keep their offsets on
//! the filer they read from. Each put rewrites the file (a temporary, its
//! fdatasync, a rename, the directory's fsync): the map holds offsets, a few
//! keys written every few seconds, so a whole rewrite costs little and a
//! crash leaves the old map or the new one, never a mix.
//!
//! File: `seaweedfs-kv`: magic, then (key length u32 LE, key, value length
//! u32 LE, value)*, then the CRC32C of all before it.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const FILE: &str = "seaweedfs-kv";
const MAGIC: &[u8; 8] = b"RFSWKV01";
/// The most keys kept, and the largest key and value: the map is for
/// offsets, not for data.
pub const MAX_KEYS: usize = 4096;
pub const MAX_KEY_BYTES: usize = 1024;
pub const MAX_VALUE_BYTES: usize = 64 << 10;

pub struct Kv {
    dir: PathBuf,
    map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Kv {
    /// The map stored in `dir` (empty when there is none yet).
    pub fn open(dir: &Path) -> Result<Kv, String> {
        let path = dir.join(FILE);
        let map = match fs::read(&path) {
            Ok(bytes) => decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        Ok(Kv {
            dir: dir.to_owned(),
            map: Mutex::new(map),
        })
    }

    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Sets `key` (an empty value removes it, as a filer does), durably
    /// before it returns.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(format!(
                "a key of 1 to {MAX_KEY_BYTES} bytes, not {}",
                key.len()
            ));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "a value of at most {MAX_VALUE_BYTES} bytes, not {}",
                value.len()
            ));
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = map.clone();
        if value.is_empty() {
            next.remove(key);
        } else {
            next.insert(key.to_vec(), value.to_vec());
        }
        if next.len() > MAX_KEYS {
            return Err(format!("at most {MAX_KEYS} keys are kept"));
        }
        self.write(&next)?;
        *map = next;
        Ok(())
    }

    fn write(&self, map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Result<(), String> {
        let path = self.dir.join(FILE);
        let temporary = self.dir.join(format!("{FILE}.tmp"));
        let io = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut file = File::create(&temporary).map_err(io)?;
        file.write_all(&encode(map)).map_err(io)?;
        file.sync_data().map_err(io)?;
        drop(file);
        fs::rename(&temporary, &path).map_err(io)?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io)
    }
}

fn encode(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    for (key, value) in map {
        for part in [key, value] {
            bytes.extend_from_slice(&(part.len() as u32).to_le_bytes());
            bytes.extend_from_slice(part);
        }
    }
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

fn decode(bytes: &[u8]) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, String> {
    let damaged = || {
        "damaged (its checksum or framing is wrong); move it away to start an empty map".to_owned()
    };
    let (body, crc) = bytes.split_last_chunk::<4>().ok_or_else(damaged)?;
    if !body.starts_with(MAGIC) || crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
        return Err(damaged());
    }
    let mut rest = &body[MAGIC.len()..];
    let take = |rest: &mut &[u8]| -> Result<Vec<u8>, String> {
        let (length, tail) = rest.split_first_chunk::<4>().ok_or_else(damaged)?;
        let length = u32::from_le_bytes(*length) as usize;
        let part = tail.get(..length).ok_or_else(damaged)?;
        *rest = &tail[length..];
        Ok(part.to_vec())
    };
    let mut map = BTreeMap::new();
    while !rest.is_empty() {
        let key = take(&mut rest)?;
        let value = take(&mut rest)?;
        map.insert(key, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn puts_survive_a_reopen_and_an_empty_value_removes() {
        let dir = tempfile::tempdir().unwrap();
        let kv = Kv::open(dir.path()).unwrap();
        assert_eq!(kv.get(b"offset"), None);
        kv.put(b"offset", b"12345678").unwrap();
        kv.put(b"other", b"x").unwrap();
        kv.put(b"other", b"").unwrap();
        let kv = Kv::open(dir.path()).unwrap();
        assert_eq!(kv.get(b"offset"), Some(b"12345678".to_vec()));
        assert_eq!(kv.get(b"other"), None);
        assert!(kv.put(b"", b"v").is_err());
        assert!(kv.put(b"k", &vec![0; MAX_VALUE_BYTES + 1]).is_err());
    }

    #[test]
    fn every_flipped_byte_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        Kv::open(dir.path()).unwrap().put(b"key", b"value").unwrap();
        let path = dir.path().join(FILE);
        let good = fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            fs::write(&path, &bad).unwrap();
            let refused = Kv::open(dir.path())
                .err()
                .expect("a flipped byte is refused");
            assert!(refused.contains("damaged"), "{refused}");
        }
        fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(Kv::open(dir.path()).is_err(), "a torn file is refused");
    }
}
