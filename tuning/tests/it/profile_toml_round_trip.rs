//! The profile's TOML parses back with exactly the keys `serve --config`
//! accepts, each value as the profile holds it, and every key commented.

use ringfeed_tuning::profile::{Value, CONFIG_KEYS};
use ringfeed_tuning::{profile_from, ProfileInputs};

fn inputs(cpus: usize, data_dir: &str) -> ProfileInputs {
    ProfileInputs {
        data_dir: data_dir.into(),
        usable_cpus: cpus,
        allowed_cpus: (0..cpus as u32).collect(),
        numa_nodes: 1,
        memory_bytes: 24 << 30,
        free_disk_bytes: 70 << 30,
        fsync_p99_us: 900,
        fsync_max_us: 3000,
        synced_write_mb_per_s: vec![
            (64 << 10, 110.0),
            (256 << 10, 350.0),
            (1 << 20, 700.0),
            (4 << 20, 760.0),
        ],
    }
}

#[test]
fn toml_parses_back_with_exactly_the_config_keys() {
    // 2 CPUs leaves cpus out, 8 pins; a data dir that needs escaping.
    for (cpus, dir) in [(2, "./ringfeed-data"), (8, "/srv/ring \"feed\"\\data")] {
        let p = profile_from(&inputs(cpus, dir));
        let text = p.to_toml();
        let table: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
        for key in table.keys() {
            assert!(
                CONFIG_KEYS.contains(&key.as_str()),
                "unknown key {key}\n{text}"
            );
        }
        for key in CONFIG_KEYS {
            let expected = p.get(key);
            let got = table.get(key);
            match (expected, got) {
                (None, None) => assert_eq!(key, "cpus", "only cpus may be left out"),
                (Some(Value::Str(s)), Some(toml::Value::String(t))) => assert_eq!(s, t),
                (Some(Value::Int(n)), Some(toml::Value::Integer(t))) => assert_eq!(*n as i64, *t),
                (Some(Value::IntList(v)), Some(toml::Value::Array(a))) => {
                    let a: Vec<i64> = a.iter().map(|x| x.as_integer().unwrap()).collect();
                    assert_eq!(v.iter().map(|&c| i64::from(c)).collect::<Vec<_>>(), a);
                }
                other => panic!("{key}: profile {other:?}\n{text}"),
            }
        }
        assert_eq!(table.contains_key("cpus"), cpus >= 4);
        assert_eq!(table["data_dir"].as_str(), Some(dir));
        // Every key line has a `# why` line right above it.
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.starts_with('#') && line.contains(" = ") {
                assert!(
                    i > 0 && lines[i - 1].starts_with("# "),
                    "no comment above {line}"
                );
            }
        }
    }
}
