//! Machine probe, disk calibration and configuration profiles for ringfeed
//! (`ringfeed tune probe|calibrate|profile`). The server's CLI calls
//! [`probe`], [`calibrate`] and [`profile`]; every report derives `Serialize`
//! for `--json` and renders itself for humans (`Display` / `render_human`).
//! Only `sys` holds `unsafe`, each block with its safety argument.
#![deny(unsafe_code)]

pub mod calibrate;
pub mod direct_io;
pub mod error;
pub mod host;
pub mod io_uring;
pub mod probe;
pub mod profile;
mod render;
pub mod storage;
mod sys;

pub use calibrate::{calibrate, Calibration};
pub use error::TuneError;
pub use probe::{probe, Probe, Problem, Severity};
pub use profile::{profile, profile_from, Profile, ProfileInputs};

/// The data dir `ringfeed` uses when none is given.
pub const DEFAULT_DATA_DIR: &str = "./ringfeed-data";

/// The calibration budget `ringfeed tune calibrate` uses when none is given.
pub const DEFAULT_CALIBRATION_BUDGET: std::time::Duration = std::time::Duration::from_secs(4);
