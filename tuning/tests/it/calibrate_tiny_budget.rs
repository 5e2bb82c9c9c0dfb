//! A calibration with a tiny budget still measures every step and removes
//! its files. (How long it took is printed: a figure, not a check; `ringfeed
//! tune calibrate` shows it on a real disk.)

use std::time::{Duration, Instant};

use ringfeed_tuning::calibrate;
use ringfeed_tuning::calibrate::WRITE_SIZES;

#[test]
fn tiny_budget_gives_positive_figures() {
    let _watchdog = ringfeed_testkit::arm();
    let (dir, _) = crate::common::real_disk_tempdir();
    let mut lines = Vec::new();
    let started = Instant::now();
    let c = calibrate(dir.path(), Duration::from_millis(300), &mut |l| {
        lines.push(l.to_string())
    })
    .expect("calibrate");
    let took = started.elapsed();
    eprintln!("a calibration with a budget of 300 ms took {took:?}");

    let f = &c.fsync;
    assert!(f.samples >= 3);
    assert!(
        f.p50_us > 0 && f.p50_us <= f.p99_us && f.p99_us <= f.max_us,
        "{f:?}"
    );
    assert_eq!(c.writes.len(), WRITE_SIZES.len());
    for w in &c.writes {
        for t in [&w.sync_each_write, &w.sync_at_end] {
            assert!(t.bytes >= w.write_bytes && t.ops >= 1, "{w:?}");
            assert!(t.mb_per_s > 0.0 && t.mb_per_s.is_finite(), "{w:?}");
        }
    }
    assert!(c.read.bytes > 0 && c.read.mb_per_s > 0.0, "{:?}", c.read);
    // One progress line per step: latency, 2 per write size, read.
    assert_eq!(lines.len(), 1 + 2 * WRITE_SIZES.len() + 1, "{lines:#?}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "calibration left files behind"
    );
    assert!(c.render_human().contains("fdatasync latency:"));
    serde_json::to_string(&c).expect("serialize");
    eprintln!("{c}");
}
