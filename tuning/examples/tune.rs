//! Runs the tuning reports the way `ringfeed tune` will, for trying them out
//! without the server: `cargo run -p ringfeed-tuning --example tune --
//! probe|calibrate|profile [--data-dir DIR] [--budget-ms N] [--json]`.

use std::path::PathBuf;
use std::time::Duration;

use ringfeed_tuning::{calibrate, probe, profile, DEFAULT_CALIBRATION_BUDGET, DEFAULT_DATA_DIR};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_else(|| "probe".into());
    let (mut dir, mut budget, mut json) = (
        PathBuf::from(DEFAULT_DATA_DIR),
        DEFAULT_CALIBRATION_BUDGET,
        false,
    );
    while let Some(a) = args.next() {
        match a.as_str() {
            "--data-dir" => dir = args.next().ok_or("--data-dir needs a value")?.into(),
            "--budget-ms" => {
                budget =
                    Duration::from_millis(args.next().ok_or("--budget-ms needs a value")?.parse()?)
            }
            "--json" => json = true,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let mut progress = |line: &str| eprintln!("{line}");
    match cmd.as_str() {
        "probe" => {
            let p = probe(&dir, None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&p)?);
            } else {
                print!("{p}");
            }
        }
        "calibrate" => {
            let c = calibrate(&dir, budget, &mut progress)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                print!("{c}");
            }
        }
        "profile" => {
            let p = probe(&dir, None)?;
            let c = calibrate(&dir, budget, &mut progress)?;
            let prof = profile(&p, &c);
            if json {
                println!("{}", serde_json::to_string_pretty(&prof)?);
            } else {
                print!("{prof}\n{}", prof.to_toml());
            }
        }
        other => return Err(format!("unknown command {other}").into()),
    }
    Ok(())
}
