//! The probe reads real values on this machine, and its reports serialize
//! and render.

use ringfeed_tuning::probe;

#[test]
fn probe_reads_kernel_cpus_memory_and_filesystem() {
    let _watchdog = ringfeed_testkit::arm();
    let (dir, fs) = crate::common::real_disk_tempdir();
    let p = probe(dir.path(), None).expect("probe");
    assert!(!p.kernel.release.is_empty());
    assert!(
        p.kernel.version.is_some(),
        "kernel release {:?} did not parse",
        p.kernel.release
    );
    assert!(p.cpus.usable() >= 1);
    assert!(!p.cpus.online.is_empty());
    assert!(p.memory.total_bytes > 0 && p.memory.available_bytes > 0);
    assert!(p.memory.available_bytes <= p.memory.total_bytes);
    assert!(
        !p.filesystem.fs_type.starts_with("unknown"),
        "{:?}",
        p.filesystem
    );
    if let Some(fs) = fs {
        assert_eq!(p.filesystem.fs_type, fs);
    }
    assert!(p.filesystem.total_bytes > 0);
    assert!(p.memlock.shards >= 1 && p.memlock.shards_assumed);
    assert!(p.io_uring.available || p.io_uring.setup_error.is_some());
    if p.io_uring.available {
        assert!(p.io_uring.opcodes.iter().all(|o| o.supported.is_some()));
    }
    // The probe leaves nothing behind in the data dir.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let human = p.render_human();
    for key in [
        "kernel:",
        "io_uring:",
        "filesystem:",
        "O_DIRECT:",
        "memlock:",
        "cpus:",
        "memory:",
        "problems:",
    ] {
        assert!(human.contains(key), "{key} missing from\n{human}");
    }
    let json = serde_json::to_value(&p).expect("serialize");
    assert!(json["direct_io"]["offset_align"].as_u64().unwrap() >= 512);
    eprintln!("{human}");
}

#[test]
fn a_missing_data_dir_probes_its_ancestor() {
    let _watchdog = ringfeed_testkit::arm();
    let (dir, _) = crate::common::real_disk_tempdir();
    let missing = dir.path().join("not/yet/here");
    let p = probe(&missing, Some(3)).expect("probe");
    assert!(!p.data_dir_exists);
    assert_eq!(p.probed_dir, dir.path());
    assert_eq!(p.memlock.shards, 3);
    assert!(p
        .notes
        .iter()
        .any(|n| n.contains("nearest existing ancestor")));
    assert!(!missing.exists(), "the probe must not create the data dir");
}
