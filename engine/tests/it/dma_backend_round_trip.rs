//! The production backend (glommio, O_DIRECT, io_uring) on a real file system:
//! records written across segment rotations read back after reopen, a torn
//! tail on a real file recovers, and the committed fixtures open through it.

use std::path::Path;

use crate::common::*;
use glommio::{LocalExecutorBuilder, Placement};
use ringfeed_engine::storage::DmaStorage;
use ringfeed_engine::{Log, LogConfig};

fn config() -> LogConfig {
    LogConfig {
        shard: 0,
        segment_bytes: 256 << 10,
        max_unsynced_bytes: 64 << 10,
    }
}

/// Runs `f` on a fresh, unpinned glommio executor.
fn on_glommio<T, Fut>(f: impl FnOnce() -> Fut + Send + 'static) -> T
where
    T: Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(f)
        .expect("glommio executor starts")
        .join()
        .expect("glommio task completes")
}

fn scratch() -> tempfile::TempDir {
    // Not /tmp: tmpfs does not do O_DIRECT. The target dir is on the work disk.
    tempfile::Builder::new()
        .prefix("dma-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

async fn open(dir: &Path) -> Log<DmaStorage> {
    let (log, _) = Log::open(DmaStorage::open(dir).unwrap(), config())
        .await
        .unwrap();
    log
}

/// Regression: this test's executor opens a freshly created (empty) segment
/// first. glommio 0.9 then probed the poll ring against the empty file, wrongly
/// cached "iopoll works" for the thread, and every later read failed with
/// EOPNOTSUPP (os error 95). `DmaStorage` primes the probe with a real file.
#[test]
fn write_rotate_close_reopen() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    let path = dir.path().to_path_buf();
    on_glommio(move || async move {
        let mut log = open(&path).await;
        append_records(&mut log, 5000, 20).await.unwrap();
        assert_eq!(log.sync().await.unwrap(), 5000);
        assert!(
            log.segment_names().len() >= 3,
            "rotated: {:?}",
            log.segment_names()
        );
        log.close().await.unwrap();
        let log = open(&path).await;
        assert_records(&read_all(&log).await, &expected(0..5000), "after reopen");
        assert_eq!(
            first_at_or_after(&log, stamp_for(1234)).await,
            Some((1234, stamp_for(1234)))
        );
    });
}

#[test]
fn torn_tail_on_a_real_file() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    let path = dir.path().to_path_buf();
    let (segment, position) = {
        let path = path.clone();
        on_glommio(move || async move {
            let mut log = open(&path).await;
            append_records(&mut log, 500, 10).await.unwrap();
            log.sync().await.unwrap();
            let last = log.chunks().last().unwrap();
            (
                ringfeed_engine::segment::segment_name(last.segment),
                last.entry.position,
            )
        })
    };
    // Tear the last chunk as a crash mid-write would.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join(&segment))
        .unwrap();
    file.set_len(position + 70).unwrap();
    drop(file);
    on_glommio(move || async move {
        let (log, report) = Log::open(DmaStorage::open(&path).unwrap(), config())
            .await
            .unwrap();
        assert!(report.truncated.is_some());
        assert_records(
            &read_all(&log).await,
            &expected(0..490),
            "after the torn tail",
        );
    });
}

#[test]
fn fixtures_open_through_o_direct() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clean");
    for entry in std::fs::read_dir(&fixture).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let path = dir.path().to_path_buf();
    on_glommio(move || async move {
        let config = LogConfig {
            shard: 0,
            segment_bytes: 16 << 10,
            max_unsynced_bytes: 4 << 10,
        };
        let (log, _) = Log::open(DmaStorage::open(&path).unwrap(), config)
            .await
            .unwrap();
        assert_records(
            &read_all(&log).await,
            &expected(0..120),
            "clean fixture via O_DIRECT",
        );
    });
}

/// Sealed segments read from their files on another thread (what the
/// server's object-store uploader ships): every segment but the newest, each
/// handed out as the exact prefix of its file up to its last chunk, offsets
/// dense from one to the next, the checksum of those bytes; a flipped byte
/// inside a chunk is refused, not handed out as a segment.
#[test]
fn sealed_segments_read_from_their_files() {
    use ringfeed_engine::segment::sealed::{read_sealed, read_sealed_in, sealed_files};
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch();
    let path = dir.path().to_path_buf();
    let names = on_glommio(move || async move {
        let mut log = open(&path).await;
        append_records(&mut log, 5000, 20).await.unwrap();
        log.sync().await.unwrap();
        let names = log.segment_names();
        log.close().await.unwrap();
        names
    });
    let sealed = sealed_files(dir.path()).unwrap();
    assert!(sealed.len() >= 2, "{sealed:?}");
    assert_eq!(
        sealed.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        names[..names.len() - 1].to_vec(),
        "every segment but the newest"
    );
    let mut expected_first = 0;
    for file in &sealed {
        assert_eq!(file.first_offset, expected_first);
        let mut bytes = Vec::new();
        let found = read_sealed(dir.path(), file, |part| {
            assert!(part.len() <= ringfeed_engine::segment::sealed::PIECE_BYTES);
            bytes.extend(part);
            Ok(())
        })
        .unwrap();
        let on_disk = std::fs::read(dir.path().join(&file.name)).unwrap();
        assert_eq!(found.bytes as usize, bytes.len());
        assert_eq!(&on_disk[..bytes.len()], &bytes[..], "{}", file.name);
        assert_eq!(found.crc32c, crc32c::crc32c(&bytes));
        assert_eq!(found.first_ts, Some(stamp_for(file.first_offset)));
        // In small pieces (chunks split inside their header, body and
        // padding): the same bytes and checks.
        let mut pieces = Vec::new();
        let small = read_sealed_in(dir.path(), file, 100, |part| {
            assert!(part.len() <= 100);
            pieces.extend(part);
            Ok(())
        })
        .unwrap();
        assert_eq!((small, &pieces), (found.clone(), &bytes));
        assert_eq!(found.last_ts, Some(stamp_for(file.next_offset - 1)));
        expected_first = file.next_offset;
    }

    // One flipped byte in the middle of the first segment's chunks.
    let first = dir.path().join(&sealed[0].name);
    let mut on_disk = std::fs::read(&first).unwrap();
    let at = ringfeed_engine::segment::SEGMENT_HEADER_BLOCK + 200;
    on_disk[at] ^= 0x40;
    std::fs::write(&first, &on_disk).unwrap();
    let err = read_sealed(dir.path(), &sealed[0], |_| Ok(())).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    let err = read_sealed_in(dir.path(), &sealed[0], 100, |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("body checksum"), "{err}");
}
