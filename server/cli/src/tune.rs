//! `ringfeed tune probe|calibrate|profile`: check the machine, measure the
//! data dir's disk, recommend a configuration.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use ringfeed_server::DEFAULT_DATA_DIR;

#[derive(Subcommand)]
pub enum Tune {
    /// Kernel, io_uring, O_DIRECT alignment, file system, memlock, cores and disk, with fixes.
    Probe {
        /// The data dir whose disk to check.
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure fdatasync latency and O_DIRECT bandwidth of the data dir's disk (a few seconds).
    Calibrate {
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Probe, calibrate, and recommend a configuration (the TOML `serve --config` reads).
    Profile {
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        #[arg(long)]
        json: bool,
        /// Write the configuration to this file.
        #[arg(long)]
        write: Option<PathBuf>,
    },
}

pub fn run(what: Tune) -> Result<()> {
    let progress = &mut |line: &str| eprintln!("{line}");
    match what {
        Tune::Probe { data_dir, json } => {
            let probe = ringfeed_tuning::probe(&data_dir, None)?;
            print_report(&probe, json, probe.render_human())
        }
        Tune::Calibrate { data_dir, json } => {
            let c = ringfeed_tuning::calibrate(
                &data_dir,
                ringfeed_tuning::DEFAULT_CALIBRATION_BUDGET,
                progress,
            )?;
            print_report(&c, json, c.render_human())
        }
        Tune::Profile {
            data_dir,
            json,
            write,
        } => {
            let probe = ringfeed_tuning::probe(&data_dir, None)?;
            let c = ringfeed_tuning::calibrate(
                &data_dir,
                ringfeed_tuning::DEFAULT_CALIBRATION_BUDGET,
                progress,
            )?;
            let profile = ringfeed_tuning::profile(&probe, &c);
            if let Some(path) = write {
                std::fs::write(&path, profile.to_toml())
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
            print_report(&profile, json, profile.render_human())
        }
    }
}

fn print_report<T: serde::Serialize>(value: &T, json: bool, human: String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{human}");
    }
    Ok(())
}
