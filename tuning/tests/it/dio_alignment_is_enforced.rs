//! The O_DIRECT alignment the probe reports is the one the filesystem
//! enforces: writes at it succeed, and (on ext4/xfs, which return EINVAL rather
//! than falling back to buffered I/O) writes at half of it fail.

use ringfeed_tuning::direct_io::{open_direct, try_direct_write};
use ringfeed_tuning::probe;

#[test]
fn reported_alignment_works_and_half_of_it_fails() {
    let _watchdog = ringfeed_testkit::arm();
    let (dir, fs) = crate::common::real_disk_tempdir();
    let p = probe(dir.path(), Some(1)).expect("probe");
    let dio = &p.direct_io;
    assert_eq!(
        dio.supported,
        Some(true),
        "O_DIRECT in {}: {dio:?}",
        dir.path().display()
    );
    assert!(dio.verified, "probe's own check failed: {dio:?}");
    let offset_align = u64::from(dio.offset_align);
    let mem_align = dio.mem_align as usize;
    assert!(
        offset_align.is_power_of_two() && offset_align >= 512,
        "{dio:?}"
    );
    assert!(mem_align.is_power_of_two() && mem_align <= 4096, "{dio:?}");
    eprintln!(
        "{}: offset/length alignment {offset_align} ({:?}), buffer alignment {mem_align}",
        fs.as_deref().unwrap_or("not ext4/xfs"),
        dio.source
    );

    let f = open_direct(&dir.path().join("aligned"), true).expect("open O_DIRECT");
    let one = offset_align as usize;
    // Offset, length and buffer address each at exactly the reported alignment.
    try_direct_write(&f, offset_align, one, mem_align).expect("write at the reported alignment");
    try_direct_write(&f, 3 * offset_align, 2 * one, mem_align).expect("write of two units");

    let Some(fs) = fs else {
        eprintln!("no ext4/xfs scratch dir here: only the success side is checked");
        return;
    };
    let einval = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(&format!("{what} succeeded on {fs}"));
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{what}: {e}");
    };
    // Even at 512 there is something smaller: ext4/xfs require the logical
    // block size, so half of it fails.
    einval(
        try_direct_write(&f, offset_align + offset_align / 2, one, 4096),
        "a write at half the offset alignment",
    );
    einval(
        try_direct_write(&f, offset_align, one / 2, 4096),
        "a write of half the length alignment",
    );
    // The buffer check needs a write that crosses a page: on 6.18 (virtio,
    // dma_alignment 511) a 512-byte write from an 8-byte aligned buffer inside
    // one page goes through as real direct I/O; only where the buffer crosses a
    // page at a misaligned point does the kernel refuse it.
    if mem_align >= 2 {
        einval(
            try_direct_write(&f, 8 * offset_align.max(4096), 4096, mem_align / 2),
            "a write from a buffer at half the memory alignment",
        );
    }
}
